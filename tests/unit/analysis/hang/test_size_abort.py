"""gloo's size-mismatch abort, judged from a real run's records (tests/golden/size_abort: the corpus script
tests/corpus/f22_save_branch_allreduce.py, where rank 0 alone calls all_reduce in its save branch and gloo
aborts it when rank 1's DDP all-reduce arrives; rank 1 then raises a transport error).

torchrun SIGTERMs rank 1 once rank 0 died, at any moment of rank 1's own exit: on a loaded host its finish
event and last heartbeat may never be written. The verdict must not change with that."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ddpdoctor.analysis import diagnose
from ddpdoctor.analysis.config import Config
from ddpdoctor.record.reader import load_run

GOLDEN = Path(__file__).resolve().parents[3] / "golden" / "size_abort"
SCRIPT = "tests/corpus/f22_save_branch_allreduce.py"


def _drop_last_lines(path: Path, n: int) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-n]))


def _heartbeats_before_training(path: Path) -> None:
    """Keep only the heartbeats from before the first DDP step (seq 0): what a rank ended early leaves."""
    keep = [ln for ln in path.read_bytes().splitlines(keepends=True) if b'"step":0,' in ln]
    assert keep, "the record has no heartbeat from before training"
    path.write_bytes(b"".join(keep))


@pytest.mark.parametrize("cut", ["intact", "no-finish-event", "only-early-heartbeats"])
def test_the_rank_that_made_the_extra_call_is_named_however_its_peer_was_ended(tmp_path, cut):
    run = tmp_path / "run"
    shutil.copytree(GOLDEN, run)
    if cut != "intact":
        _drop_last_lines(run / "ranks" / "1" / "events.jsonl", 1)  # the finish event
        assert b'"kind":"finish"' not in (run / "ranks" / "1" / "events.jsonl").read_bytes()
    if cut == "only-early-heartbeats":
        _heartbeats_before_training(run / "ranks" / "1" / "heartbeat.jsonl")
    rep = diagnose(load_run(str(run)), Config(timeout=60.0))
    assert (rep.verdict, rep.exit_code) == ("hang", 3), [f.message for f in rep.findings]
    f = rep.findings[0]
    assert f.id == "hang.rank-conditional-collective", f.message
    assert f.culprits == (0,), f.message
    assert "gloo aborted rank 0 (data size mismatch)" in f.message
    lines = {(loc.rank, loc.line) for loc in f.locations if loc.file.endswith(SCRIPT)}
    assert (0, 42) in lines, f.locations  # the all_reduce only rank 0 reaches (# FAULT)


def _ended_before_its_records(rank_dir: Path) -> None:
    """What torchrun's SIGTERM can leave of a rank cut before it wrote its end: no flight.json, no error.json,
    no finish event, no heartbeat since training began."""
    (rank_dir / "flight.json").unlink()
    (rank_dir / "error.json").unlink()
    _drop_last_lines(rank_dir / "events.jsonl", 1)
    assert b'"kind":"finish"' not in (rank_dir / "events.jsonl").read_bytes()
    _heartbeats_before_training(rank_dir / "heartbeat.jsonl")


def _rank0_made_the_extra_call(tmp_path: Path, golden: Path, cut: bool):
    """The golden run (rank 1 cut as torchrun's SIGTERM can, where ``cut``) diagnosed: a hang whose first finding
    names rank 0 alone for a rank-conditional collective; that finding."""
    run = tmp_path / "run"
    shutil.copytree(golden, run)
    if cut:
        _ended_before_its_records(run / "ranks" / "1")
    rep = diagnose(load_run(str(run)), Config(timeout=60.0))
    assert (rep.verdict, rep.exit_code) == ("hang", 3), [f.message for f in rep.findings]
    f = rep.findings[0]
    assert f.id == "hang.rank-conditional-collective" and f.culprits == (0,), f.message
    return f


FLIGHT = GOLDEN.parent / "size_abort_flight"


@pytest.mark.parametrize("cut", ["intact", "ended-before-its-dumps"])
def test_a_peer_ended_before_its_flight_record_and_its_late_heartbeats_leaves_the_culprit_named(tmp_path, cut):
    """The job once more, every rank dumping torch's recorder at its end (tests/golden/size_abort_flight). torchrun
    may SIGTERM rank 1 before its error.json, its flight.json, its finish event and every heartbeat since training
    began: its last heartbeat then says position 0. That is not where it ended: DDP's calls rank 0's recorder
    holds at positions rank 1 may have reached are unknown there, not missing (CI once named rank 0's DDP
    construction, line 23, as the extra call)."""
    f = _rank0_made_the_extra_call(tmp_path, FLIGHT, cut != "intact")
    lines = {(loc.rank, loc.line, loc.role) for loc in f.locations if loc.file.endswith(SCRIPT)}
    assert (0, 42, "diverged") in lines, f.locations  # the all_reduce only rank 0 reaches (# FAULT)
    assert not [x for x in lines if x[0] == 0 and x[2] == "diverged" and x[1] != 42], f.locations


ASYNC_RECORDER = GOLDEN.parent / "async_abort_recorder"
ASYNC_SCRIPT = "probes/trainer_async_save.py"


@pytest.mark.parametrize("cut", ["intact", "peer-ended-before-its-records"])
def test_an_aborted_rank_off_its_own_routine_is_named_where_its_peers_calls_are_unknown(tmp_path, cut):
    """probes/trainer_async_save.py under DDPDOCTOR_COLLECTIVES=recorder (tests/golden/async_abort_recorder):
    rank 0's asynchronous extra all_reduce (line 40) met rank 1's DDP all-reduce and gloo aborted rank 0, whose
    abort dump holds the extra call and, after it, its next DDP all-reduce. Cut as torchrun's SIGTERM can, rank 1
    leaves no flight record, no error and no beat since training began: none of its calls is known. Rank 0's
    own routine still tells the extra call (it once read as an abnormal exit with no culprit)."""
    f = _rank0_made_the_extra_call(tmp_path, ASYNC_RECORDER, cut != "intact")
    diverged = {(loc.rank, loc.line) for loc in f.locations if loc.role == "diverged"}
    assert diverged == {(0, 40)}, f.locations  # the all_reduce of the checkpoint branch (# EXTRA)
    assert all(loc.file.endswith(ASYNC_SCRIPT) for loc in f.locations if loc.role == "diverged")


RECORDER = GOLDEN.parent / "size_abort_recorder"


def test_a_rank_whose_calls_were_left_to_the_recorder_is_named_from_the_stack_gloo_aborted_it_in(tmp_path):
    """The same job under DDPDOCTOR_COLLECTIVES=recorder (tests/golden/size_abort_recorder): rank 0's collectives
    were left to torch's recorder, and gloo aborted it before any record of it was read, so its positions are
    unknown. faulthandler's stack has it in all_reduce at line 42, a line rank 1's flight record never reached:
    rank 0 made the extra call there (it once named rank 1, whose recorder saw DDP's first all_gather)."""
    run = tmp_path / "run"
    shutil.copytree(RECORDER, run)
    rep = diagnose(load_run(str(run)), Config(timeout=60.0))
    assert (rep.verdict, rep.exit_code) == ("hang", 3), [f.message for f in rep.findings]
    f = rep.findings[0]
    assert f.id == "hang.rank-conditional-collective" and f.culprits == (0,), f.message
    assert (0, 42) in {(loc.rank, loc.line) for loc in f.locations if loc.file.endswith(SCRIPT)}, f.locations
    assert any("no flight record from rank 0" in n and "unknown" in n for n in rep.notes), rep.notes


def test_an_aborted_rank_at_a_line_the_others_reached_too_names_no_culprit(tmp_path):
    """The same record with rank 0 aborted inside backward at line 36, where rank 1's DDP all-reduces were
    made too (an asynchronous extra call waited on later looks so): nothing tells which rank diverged. No
    divergence is made up (neither rank is a culprit of a hang finding), and the run is not OK."""
    run = tmp_path / "run"
    shutil.copytree(RECORDER, run)
    fatal = run / "ranks" / "0" / "fatal.txt"
    fatal.write_text(
        fatal.read_text().replace(f'"{SCRIPT}", line 42 in _save_snapshot', f'"{SCRIPT}", line 36 in _run_epoch')
    )
    assert "line 36 in _run_epoch" in fatal.read_text()
    rep = diagnose(load_run(str(run)), Config(timeout=60.0))
    assert rep.exit_code != 0, [f.message for f in rep.findings]
    assert not [f for f in rep.findings if f.id.startswith("hang.") and f.culprits], [
        (f.id, f.culprits) for f in rep.findings
    ]
    assert any("no flight record from rank 0" in n and "unknown" in n for n in rep.notes), rep.notes
