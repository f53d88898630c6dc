"""startup.detect on hand-built runs: a job that never became distributed is named (no rank started,
a rank raised or exited non-zero before init_process_group, the script never called it); a run whose
ranks initialised, or that the monitor judged, gets nothing from it."""

from __future__ import annotations

import json

from builder import RunBuilder

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.hang import startup
from ddpdoctor.record.reader import load_run

CFG = Config(timeout=10.0)


def _detect(b: RunBuilder):
    return startup.detect(load_run(str(b.root)), CFG)


def _started(b: RunBuilder, rank: int) -> RunBuilder:
    return b.add(rank, "events.jsonl", "start", 0.0, pid=999999, local_rank=rank)


def test_initialised_ranks_give_no_startup_finding(tmp_path):
    b = RunBuilder(tmp_path / "run").start(0).start(1).finish(0, 2.0).finish(1, 2.0)
    assert _detect(b) == []


def test_no_rank_at_all_is_not_started_with_torchruns_code_and_error_line(tmp_path):
    b = RunBuilder(tmp_path / "run").add(None, "monitor.jsonl", "exit", 1.0, returncode=2)
    (b.root / "torchrun.log").write_text("starting\nValueError: bad --nproc-per-node 'x'\nbye\n")
    (f,) = _detect(b)
    assert f.id == "run.not-started"
    assert f.message == "no rank started (torchrun exit code 2): ValueError: bad --nproc-per-node 'x'"


def test_an_exception_before_init_is_failed_before_init_at_its_line(tmp_path):
    b = _started(RunBuilder(tmp_path / "run"), 0)
    b.add(0, "events.jsonl", "finish", 1.0, code=1, exception=True)
    frame = ["/work/train.py", 7, "<module>"]
    (b.root / "ranks" / "0" / "error.json").write_text(
        json.dumps({"type": "ImportError", "message": "no module named foo\nx", "frames": [frame], "user_frame": frame})
    )
    (f,) = _detect(b)
    assert f.id == "run.failed-before-init" and f.culprits == (0,)
    assert "raised ImportError at /work/train.py:7 before init_process_group: no module named foo" in f.message
    assert [(l.rank, l.line, l.role) for l in f.locations] == [(0, 7, "raised")]


def test_a_non_zero_exit_before_init_names_the_code(tmp_path):
    b = _started(RunBuilder(tmp_path / "run"), 0)
    b.add(0, "events.jsonl", "finish", 1.0, code=3, exception=False)
    (f,) = _detect(b)
    assert (f.id, f.culprits, f.evidence["code"]) == ("run.failed-before-init", (0,), 3)
    assert "exited with code 3 before init_process_group" in f.message


def test_a_script_that_finished_without_init_is_not_distributed(tmp_path):
    b = _started(RunBuilder(tmp_path / "run"), 0)
    b.add(0, "events.jsonl", "finish", 1.0, code=0, exception=False)
    (f,) = _detect(b)
    assert f.id == "run.no-distributed" and "init_process_group" in f.message


def test_a_run_the_monitor_judged_is_left_to_the_hang_detectors(tmp_path):
    b = _started(RunBuilder(tmp_path / "run"), 0)
    b.add(None, "monitor.jsonl", "verdict", 5.0, mode="timeout", reason="x")
    assert _detect(b) == []


def test_heartbeats_that_prove_an_init_cut_from_the_events_give_no_startup_finding(tmp_path):
    b = _started(RunBuilder(tmp_path / "run"), 0).hb(0, 1.0, 4).hb(0, 2.0, 8)
    b.add(0, "events.jsonl", "finish", 3.0, code=0, exception=False)
    assert _detect(b) == []


def test_a_rank_killed_before_init_is_left_to_the_crash_finding_not_called_undistributed(tmp_path):
    # rank 1 SIGKILLed before init_process_group, torchrun then ended rank 0: no finish events at all
    b = _started(_started(RunBuilder(tmp_path / "run"), 0), 1)
    b.add(None, "monitor.jsonl", "exit", 4.0, returncode=1)
    (b.root / "ranks" / "0" / "terminated.txt").write_text("SIGTERM\n")
    assert _detect(b) == []
    from ddpdoctor.analysis.ending import unexplained

    (f,) = unexplained(load_run(str(b.root)), [])
    assert f.id == "crash.abnormal-exit" and f.culprits == (1,)


def _launcher_run(tmp_path, ranks, local_world_size=None, returncode=0):
    b = RunBuilder(tmp_path / "run", mode="launcher", torchrun_args=[])
    for r in ranks:
        b.add(r, "events.jsonl", "start", 0.0, pid=999999, local_rank=r, local_world_size=local_world_size)
        b.add(r, "events.jsonl", "init", 0.1, global_rank=r, world_size=4, backend="gloo")
        b.finish(r, 1.0)
    b.add(None, "monitor.jsonl", "exit", 2.0, returncode=returncode)
    return load_run(str(tmp_path / "run"))


def test_the_launcher_forms_ranks_that_never_reported_in_are_named(tmp_path):
    (f,) = startup.not_entered(_launcher_run(tmp_path, [0, 2], local_world_size=4), Config())
    assert f.id == "launch.rank-not-entered" and f.culprits == (1, 3) and "ranks 1, 3" in f.message


def test_ranks_on_other_nodes_are_not_the_launchers_to_enter_here(tmp_path):
    assert startup.not_entered(_launcher_run(tmp_path, [0, 1], local_world_size=2), Config()) == []


def test_a_launch_command_that_ran_no_entered_rank_is_never_ok(tmp_path):
    from ddpdoctor.analysis import diagnose

    report = diagnose(_launcher_run(tmp_path, [], returncode=0), Config(), "hang")
    assert [f.id for f in report.findings] == ["launch.rank-not-entered"] and report.exit_code == 4
