"""What a rank writes about itself (rank/rankfiles.py): the manifest read back, and an exception as JSON
with its frames outermost first and the user's innermost line; torchrun's SIGTERM held back while a rank
writes its end (in a child process: enable_faulthandler would take over pytest's own faulthandler and
SIGTERM handler in this one)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor.rank.rankfiles import error_record, read_manifest

SCRIPT = """
def load(batch):
    return batch["labels"]

def main():
    load({})
"""


def test_read_manifest(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({"command": "hang", "settings": {"a": 1}}))
    assert read_manifest(str(tmp_path)) == {"command": "hang", "settings": {"a": 1}}
    with pytest.raises(FileNotFoundError):
        read_manifest(str(tmp_path / "none"))


def test_an_exception_record_names_the_users_innermost_line(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    ns: dict = {}
    exec(compile(SCRIPT, str(script), "exec"), ns)
    try:
        ns["main"]()
    except KeyError as exc:
        rec = error_record(exc)
    assert rec["type"] == "KeyError" and rec["module"] == "builtins" and rec["message"] == "'labels'"
    assert rec["user_frame"] == [str(script), 3, "load"]
    assert [f[2] for f in rec["frames"]][-2:] == ["main", "load"]
    assert rec["pid"] == os.getpid()


def test_a_long_message_is_cut() -> None:
    try:
        raise RuntimeError("x" * 10_000)
    except RuntimeError as exc:
        rec = error_record(exc)
    assert len(rec["message"]) == 4000


DEFERRED = """
import os, signal, sys, time
from ddpdoctor.rank import rankfiles
rankfiles.enable_faulthandler(sys.argv[1])
{setup}
with rankfiles.sigterm_deferred():
    os.kill(os.getpid(), signal.SIGTERM)  # torchrun's SIGTERM, while the rank writes its end
    time.sleep(0.2)
    open(os.path.join(sys.argv[1], "flight.json"), "w").write("{{}}")
print("after", signal.getsignal(signal.SIGTERM), flush=True)
time.sleep(5)
"""


def _deferred(tmp_path: Path, setup: str = "") -> subprocess.CompletedProcess:
    code = DEFERRED.format(setup=setup)
    return subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60, check=False
    )


def test_sigterm_waits_for_the_records_then_ends_the_rank_as_before(tmp_path: Path) -> None:
    """The record written inside the block survives a SIGTERM sent before it; the rank then dies of that
    SIGTERM (not later, not by its own exit), with faulthandler's stack in terminated.txt as before."""
    r = _deferred(tmp_path)
    assert r.returncode == -signal.SIGTERM, (r.returncode, r.stderr[-2000:])
    assert (tmp_path / "flight.json").read_text() == "{}"
    assert "after" not in r.stdout  # delivered at the block's end, before the script went on
    assert "most recent call first" in (tmp_path / "terminated.txt").read_text()


def test_a_scripts_own_sigterm_handler_is_put_back_and_called(tmp_path: Path) -> None:
    setup = "signal.signal(signal.SIGTERM, lambda s, f: (print('own handler', flush=True), sys.exit(7)))"
    r = _deferred(tmp_path, setup)
    assert (r.returncode, r.stdout.strip()) == (7, "own handler"), r.stderr[-2000:]
    assert (tmp_path / "flight.json").read_text() == "{}"
