"""run.restarted on hand-built restarted runs: a job that finished after a restart is a warning naming what ended
attempt 0 (culprit, exception, line), exit 0; restarts used up leave the last attempt's crash as the verdict
with the earlier attempt in a note; a deadlock ended with restarts left says it was ended, not restarted."""

from __future__ import annotations

import json

from builder import RunBuilder, pending

from ddpdoctor.analysis import diagnose
from ddpdoctor.analysis.config import Config
from ddpdoctor.record import schema
from ddpdoctor.record.reader import load_run
from ddpdoctor.render import json_report, text

CFG = Config(timeout=10.0)
ARGS = ["--nproc-per-node", "2", "--max-restarts", "1", "--standalone"]


def _raise(root, rank: int, line: int, message: str) -> None:
    (root / "ranks" / str(rank) / "error.json").write_text(
        json.dumps(
            {"type": "ValueError", "message": message, "frames": [], "user_frame": ["/work/train.py", line, "main"]}
        )
    )


def _attempt(root, k: int, t0: float, fails: bool) -> RunBuilder:
    b = RunBuilder(root, torchrun_args=ARGS, **({"attempt": k, "attempt_created": t0} if k else {}))
    b.start(0, t0 + 1).start(1, t0 + 1)
    if fails:
        b.hb(0, t0 + 2, 5, pending=pending("all_reduce", 6, 18, t0 + 2))
        b.finish(1, t0 + 2.5, code=1, exception=True, seq=5)
        _raise(root, 1, 21, f"boom on attempt {k}")
        (root / "ranks" / "0" / "terminated.txt").write_text('File "/work/train.py", line 18 in main\n')
    else:
        b.finish(0, t0 + 3, seq=10).finish(1, t0 + 3, seq=10)
    return b


def _run(tmp_path, last_fails: bool):
    run = tmp_path / "run"
    top = _attempt(run, 0, 0.0, True)
    top.add(None, schema.MONITOR, "spawned", 0.5, pid=1)
    _attempt(run / "attempts" / "1", 1, 10.0, last_fails)
    top.add(None, schema.MONITOR, "restart", 10.5, attempt=1, max_restarts=1)
    top.add(None, schema.MONITOR, "exit", 20.0, returncode=1 if last_fails else 0)
    return diagnose(load_run(str(run)), CFG, "hang")


def test_a_job_that_finished_after_a_restart_is_a_warning_naming_attempt_0(tmp_path):
    report = _run(tmp_path, last_fails=False)
    assert (report.verdict, report.exit_code) == ("ok", 0)
    (f,) = report.findings
    assert (f.id, f.severity, f.culprits) == ("run.restarted", "warning", (1,))
    assert f.message.startswith(
        "the job finished on attempt 1 after 1 restart of --max-restarts 1; attempt 0 ended at train.py:21"
    )
    assert "ValueError: boom on attempt 0" in f.message
    assert [(l.rank, l.line, l.role) for l in f.locations][0] == (1, 21, "attempt 0: raised")
    assert [(a.attempt, a.verdict, a.culprits) for a in report.attempts] == [(0, "crash", (1,)), (1, "ok", ())]
    assert report.attempts[1].summary == "healthy: no findings"
    doc = json_report.to_dict(report)
    assert doc["attempts"][0] == {
        "attempt": 0,
        "verdict": "crash",
        "exit_code": 1,
        "culprits": [1],
        "summary": report.attempts[0].summary,
        "findings": list(report.attempts[0].findings),
    }
    assert "[WARN] run.restarted" in text.render(report)
    # --fail-on warning fails a job that only a restart saved
    assert diagnose(load_run(str(tmp_path / "run")), Config(timeout=10.0, fail_on="warning"), "hang").exit_code == 1


def test_restarts_used_up_the_last_attempts_crash_decides_and_the_earlier_is_a_note(tmp_path):
    report = _run(tmp_path, last_fails=True)
    assert (report.verdict, report.exit_code) == ("crash", 1)
    crash = next(f for f in report.findings if f.id == "crash.exception")
    assert crash.culprits == (1,) and "boom on attempt 1" in crash.message
    note = next(f for f in report.findings if f.id == "run.restarted")
    assert note.severity == "note" and note.message.startswith("all 2 attempts failed")
    assert "boom on attempt 0" in note.message
    assert [a.verdict for a in report.attempts] == ["crash", "crash"]


def test_a_deadlock_ended_with_restarts_left_says_the_job_was_ended_not_restarted(tmp_path):
    b = RunBuilder(tmp_path / "run", torchrun_args=["--max-restarts", "2"]).start(0).start(1)
    b.add(None, schema.MONITOR, "verdict", 5.0, mode="certain", reason="rank 0 waits")
    b.add(None, schema.MONITOR, "kill", 5.1, reason="verdict")
    b.add(None, schema.MONITOR, "exit", 6.0, returncode=-15)
    report = diagnose(load_run(str(b.root)), CFG, "hang")
    (note,) = [n for n in report.notes if "rather than let torchrun restart it" in n]
    assert "attempt 0" in note and "2 of --max-restarts 2 left" in note and "proven deadlock" in note
    assert report.attempts == ()
    # without restarts left (or without --max-restarts) nothing is said
    plain = RunBuilder(tmp_path / "plain").start(0).start(1)
    plain.add(None, schema.MONITOR, "verdict", 5.0, mode="certain", reason="x").add(
        None, schema.MONITOR, "kill", 5.1, reason="verdict"
    )
    assert not [n for n in diagnose(load_run(str(plain.root)), CFG, "hang").notes if "restart" in n]
