"""Elastic restarts (torchrun --max-restarts), run for real: torchrun ranks on gloo, restarted by torchrun's own
agent. What a user sees: the verdict and exit code, run.restarted naming what ended each failed attempt (its
culprit rank, exception and line), the last attempt judged on its own, a deadlock that ends the job instead
of a restart; `ddpdoctor analyze` reads the same back, and no process is left (helpers.ddpdoctor)."""

from __future__ import annotations

import pytest
from helpers import TESTS, ddpdoctor, finding, lines_of, marker_line

pytestmark = pytest.mark.extended

SCRIPTS = TESTS / "scripts"
FLAKY = SCRIPTS / "elastic_flaky.py"
DEADLOCK = SCRIPTS / "elastic_deadlock.py"
# torch 2.13's c10d rendezvous shares its TCP store with the workers across restarts, and the store keeps
# attempt 0's gloo addresses: attempt 1's init_process_group connects to dead ranks (plain torchrun fails the
# same way). torch's own switch gives each attempt a store of its own; a user sets it, as the tests do here.
ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def test_a_job_that_finishes_after_a_restart_warns_with_what_ended_attempt_0(tmp_path):
    r = ddpdoctor(["hang", "--max-restarts", "1", str(FLAKY)], tmp_path, timeout=180, env=ENV)
    assert r.code == 0, r.err[-3000:]
    assert r.report["verdict"] == "ok"
    f = finding(r.report, "run.restarted")
    assert f["severity"] == "warning" and f["culprits"] == [1]
    assert "attempt 0 ended at elastic_flaky.py:" in f["message"] and "RuntimeError" in f["message"]
    assert "flaky failure on attempt 0" in f["message"] and "finished on attempt 1" in f["message"]
    assert marker_line(FLAKY, "RAISE") in lines_of(f, 1)
    assert [(a["attempt"], a["verdict"], a["culprits"]) for a in r.report["attempts"]] == [
        (0, "crash", [1]),
        (1, "ok", []),
    ]
    assert "[WARN] run.restarted" in r.out
    assert (r.run_dir / "attempts" / "1" / "ranks" / "0").is_dir()
    # analyze reads the same report back (no torch)
    again = ddpdoctor(["analyze", str(r.run_dir)], tmp_path, env=ENV)
    assert again.code == 0, again.err[-2000:]
    g = finding(again.report, "run.restarted")
    assert (g["message"], g["culprits"]) == (f["message"], f["culprits"])
    assert again.report["attempts"] == r.report["attempts"]


def test_restarts_used_up_the_last_attempt_is_the_crash_and_the_earlier_is_listed(tmp_path):
    r = ddpdoctor(["hang", "--max-restarts", "1", str(FLAKY), "--always"], tmp_path, timeout=180, env=ENV)
    assert r.code == 1, r.err[-3000:]
    assert r.report["verdict"] == "crash"
    f = finding(r.report, "crash.exception")
    assert f["culprits"] == [1] and "flaky failure on attempt 1" in f["message"]
    assert marker_line(FLAKY, "RAISE") in lines_of(f, 1)
    note = finding(r.report, "run.restarted")
    assert note["severity"] == "note" and "all 2 attempts failed" in note["message"]
    assert "attempt 0 ended at elastic_flaky.py:" in note["message"] and "on attempt 0" in note["message"]
    assert [(a["attempt"], a["verdict"]) for a in r.report["attempts"]] == [(0, "crash"), (1, "crash")]


def test_a_deadlock_ends_the_job_rather_than_a_restart(tmp_path):
    r = ddpdoctor(["hang", "--max-restarts", "2", str(DEADLOCK)], tmp_path, timeout=180, env=ENV)
    assert r.code == 3, r.err[-3000:]
    f = finding(r.report, "hang.rank-conditional-collective")
    assert f["culprits"] == [0] and marker_line(DEADLOCK, "EXTRA") in lines_of(f, 0)
    assert not (r.run_dir / "attempts").exists()  # torchrun never restarted it
    assert r.report["attempts"] == [] and "run.restarted" not in [x["id"] for x in r.report["findings"]]
    assert any("rather than let torchrun restart it (2 of --max-restarts 2 left)" in n for n in r.report["notes"])
