"""Damaged run directories (a real run's records, tests/golden/healthy, with a rank's folder deleted or its
events cut) are judged from what is left, and the damage is named: never an invented verdict, never OK."""

from __future__ import annotations

import shutil
from pathlib import Path

from ddpdoctor.analysis import diagnose
from ddpdoctor.analysis.config import Config
from ddpdoctor.record.reader import load_run

GOLDEN = Path(__file__).resolve().parents[3] / "golden" / "healthy"


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(GOLDEN, run)
    return run


def _diagnose(run: Path):
    return diagnose(load_run(str(run)), Config(timeout=60.0))


def _cut(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def test_the_intact_run_is_ok(tmp_path):
    rep = _diagnose(_run(tmp_path))
    assert (rep.verdict, [f.id for f in rep.findings if f.severity == "error"]) == ("ok", [])


def test_a_deleted_rank_folder_of_a_one_node_run_is_missing_not_on_another_node(tmp_path):
    run = _run(tmp_path)
    shutil.rmtree(run / "ranks" / "1")
    rep = _diagnose(run)
    f = rep.findings[0]
    assert (f.id, f.culprits, rep.exit_code) == ("rundir.records-missing", (1,), 1)
    assert "ranks/1 is absent" in f.message
    assert not any("another node" in g.message for g in rep.findings)


def test_events_cut_before_init_are_not_a_failure_before_init(tmp_path):
    run = _run(tmp_path)
    for r in (0, 1):  # each rank's events cut inside its init line; heartbeats still count 16 steps
        _cut(run / "ranks" / str(r) / "events.jsonl", 200)
    rep = _diagnose(run)
    ids = [f.id for f in rep.findings]
    assert ids[0] == "rundir.records-missing" and rep.exit_code == 1
    assert not any(i.startswith("run.") for i in ids)
    assert rep.findings[0].culprits == (0, 1) and "16 DDP steps" in rep.findings[0].message


def test_a_cut_finish_event_of_a_job_that_exited_0_is_not_a_kill(tmp_path):
    run = _run(tmp_path)
    ev = run / "ranks" / "1" / "events.jsonl"
    lines = ev.read_bytes().splitlines(keepends=True)
    ev.write_bytes(b"".join(lines[:-1]) + lines[-1][:20])  # the finish line cut mid-way
    rep = _diagnose(run)
    f = rep.findings[0]
    assert (f.id, f.culprits) == ("rundir.records-missing", (1,))
    assert not any(g.id == "crash.abnormal-exit" for g in rep.findings)
    assert "killed" not in " ".join(g.message for g in rep.findings)


def test_a_hang_with_a_deleted_rank_folder_never_says_the_rank_is_on_another_node(tmp_path):
    """A hang's records (tests/golden/rank_conditional) with rank 1's folder deleted: both the damage and the
    wait are named, and no finding places rank 1 on another node of a job that ran on one."""
    run = tmp_path / "run"
    shutil.copytree(GOLDEN.parent / "rank_conditional", run)
    shutil.rmtree(run / "ranks" / "1")
    rep = _diagnose(run)
    ids = [f.id for f in rep.findings]
    assert "rundir.records-missing" in ids and rep.verdict != "ok", ids
    assert not any("another node" in f.message or "other nodes" in f.message for f in rep.findings), [
        f.message for f in rep.findings
    ]
    timeout = next(f for f in rep.findings if f.id == "hang.timeout")
    assert "rank 1 left no records here" in timeout.message


def _hang(tmp_path: Path) -> Path:
    run = tmp_path / "hang"
    shutil.copytree(GOLDEN.parent / "rank_conditional", run)
    return run


def test_a_hang_whose_monitor_log_is_deleted_is_judged_from_the_ledgers_never_ok(tmp_path):
    """monitor.jsonl held the live verdict, the kill and the exit: without it the ranks' pending collectives
    still show the divergence, and the loss itself is named."""
    run = _hang(tmp_path)
    (run / "monitor.jsonl").unlink()
    rep = _diagnose(run)
    ids = [f.id for f in rep.findings]
    assert rep.verdict == "hang" and rep.exit_code == 3, ids
    assert ids[:2] == ["rundir.records-missing", "hang.rank-conditional-collective"]
    assert "monitor.jsonl is absent" in rep.findings[0].message
    assert rep.findings[1].culprits == (0,)


def test_a_hang_whose_monitor_log_is_cut_before_its_exit_is_never_ok(tmp_path):
    run = _hang(tmp_path)
    log = run / "monitor.jsonl"
    data = log.read_bytes()
    _cut(log, len(data) - 30)  # inside the exit record
    rep = _diagnose(run)
    assert rep.verdict == "hang", [f.id for f in rep.findings]
    assert "monitor.jsonl is cut" in rep.findings[0].message
    assert any(n.startswith("records incomplete: monitor.jsonl ends in a cut line") for n in rep.notes)


def test_a_healthy_run_without_its_monitor_log_is_ok_and_says_the_log_is_gone(tmp_path):
    """Every rank's own finish event (exit 0) says how it ended: OK, with the loss in a note."""
    run = _run(tmp_path)
    (run / "monitor.jsonl").unlink()
    rep = _diagnose(run)
    assert rep.verdict == "ok" and not [f for f in rep.findings if f.severity == "error"]
    assert any("monitor.jsonl is absent" in n for n in rep.notes), rep.notes


def test_an_emptied_rank_folder_is_named_missing(tmp_path):
    run = _hang(tmp_path)
    for f in (run / "ranks" / "1").iterdir():
        f.unlink()
    rep = _diagnose(run)
    f = rep.findings[0]
    assert (f.id, f.culprits) == ("rundir.records-missing", (1,))
    assert "ranks/1 is empty" in f.message and rep.verdict == "hang"


def test_a_cut_ledger_keeps_the_verdict_and_says_the_records_are_incomplete(tmp_path):
    run = _hang(tmp_path)
    ledger = run / "ranks" / "1" / "ledger.jsonl"
    _cut(ledger, len(ledger.read_bytes()) // 2)
    rep = _diagnose(run)
    assert rep.verdict == "hang"
    assert any(n.startswith("records incomplete: ranks/1/ledger.jsonl ends in a cut line") for n in rep.notes)
