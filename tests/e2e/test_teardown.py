"""torch 2.13 + gloo sometimes aborts a rank at interpreter exit after it finished its work
("terminate called without an active exception"). These tests make that happen every time, with a real
SIGABRT at exit on rank 1, and check the verdicts do not depend on it."""

from __future__ import annotations

from helpers import PROBES, ddpdoctor, finding

ABORT_AT_EXIT = """
import atexit, os, signal, sys
def _abort():
    if os.environ.get("RANK") == "1":
        sys.stderr.write("terminate called without an active exception\\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGABRT)
atexit.register(_abort)
"""


def with_abort(tmp_path, probe: str) -> str:
    src = (PROBES / probe).read_text()
    out = tmp_path / probe
    out.write_text(ABORT_AT_EXIT + src)
    return str(out)


def test_abort_after_finishing_is_a_teardown_warning(tmp_path):
    r = ddpdoctor(["hang", with_abort(tmp_path, "healthy.py")], tmp_path)
    assert r.code == 0, r.out + r.err[-2000:]
    f = finding(r.report, "teardown.gloo-abort")
    assert f["severity"] == "warning" and f["ranks"] == [1]
    assert [x for x in r.report["findings"] if x["severity"] == "error"] == []


def test_early_exit_is_still_found_when_the_exiting_rank_aborts(tmp_path):
    r = ddpdoctor(["hang", with_abort(tmp_path, "early_exit.py")], tmp_path)
    assert r.code == 3, r.out + r.err[-2000:]
    f = finding(r.report, "hang.early-exit")
    assert 1 in [l["rank"] for l in f["locations"]]
    finding(r.report, "teardown.gloo-abort")
