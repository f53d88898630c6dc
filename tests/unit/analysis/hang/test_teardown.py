"""torch 2.13 + gloo sometimes aborts a rank at interpreter exit after it finished its work
("terminate called without an active exception"). These tests make that happen every time, with a real
SIGABRT at exit on rank 1, and check the verdicts do not depend on it."""

from __future__ import annotations

from builder import RunBuilder

from ddpdoctor.analysis import diagnose
from ddpdoctor.analysis.config import Config
from ddpdoctor.record.reader import load_run


def cut_run(tmp_path, fwd0: int, seq0: int) -> RunBuilder:
    """Rank 1 finished (3 DDP steps, 11 collectives) and aborted at exit; torchrun then ended rank 0."""
    b = RunBuilder(tmp_path / "run").start(0).start(1)
    b.coll(0, 10, 24).coll(1, 10, 24)
    b.hb(0, 2.0, seq0, step=fwd0, in_backward=fwd0 > 3).finish(1, 1.9, seq=11)
    b.add(None, "monitor.jsonl", "exit", 2.5, returncode=1)
    log = b.root / "logs" / "x" / "attempt_0" / "1"
    log.mkdir(parents=True)
    (log / "stderr.log").write_text("terminate called without an active exception\n")
    return b


def test_a_rank_cut_off_after_going_further_is_an_early_exit(tmp_path):
    report = diagnose(load_run(str(cut_run(tmp_path, fwd0=4, seq0=13).root)), Config())
    assert [f.id for f in report.findings] == ["hang.early-exit", "teardown.gloo-abort"]
    assert report.exit_code == 3
    assert (1, 24) in [(l.rank, l.line) for l in report.findings[0].locations]  # its last collective


def test_a_rank_cut_off_in_the_forward_of_an_extra_step_is_an_early_exit(tmp_path):
    """Cut before its next collective: same sequence position, one DDP forward more."""
    report = diagnose(load_run(str(cut_run(tmp_path, fwd0=4, seq0=11).root)), Config())
    f = report.findings[0]
    assert f.id == "hang.early-exit" and report.exit_code == 3
    assert (1, 24) in [(l.rank, l.line) for l in f.locations]


def test_a_rank_cut_off_at_the_same_point_is_only_teardown(tmp_path):
    report = diagnose(load_run(str(cut_run(tmp_path, fwd0=3, seq0=11).root)), Config())
    assert [f.id for f in report.findings] == ["teardown.gloo-abort"]
    assert report.exit_code == 0
