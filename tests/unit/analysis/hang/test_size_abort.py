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


def test_a_rank_whose_calls_were_left_to_the_recorder_and_lost_is_no_divergence(tmp_path):
    """The same job under DDPDOCTOR_COLLECTIVES=recorder (tests/golden/size_abort_recorder): rank 0's collectives
    were left to torch's recorder, and gloo aborted it before any flight record of it was read. Its positions are
    unknown, not DDP's internal calls: no divergence is read from them (it once named rank 1, whose recorder saw
    DDP's first all_gather, as the rank that diverged), the run is not OK, and a note says what is missing."""
    run = tmp_path / "run"
    shutil.copytree(GOLDEN.parent / "size_abort_recorder", run)
    rep = diagnose(load_run(str(run)), Config(timeout=60.0))
    assert rep.exit_code != 0, [f.message for f in rep.findings]
    assert not [f for f in rep.findings if f.id.startswith("hang.") and 1 in f.culprits], [
        (f.id, f.culprits) for f in rep.findings
    ]
    assert any("no flight record from rank 0" in n and "unknown" in n for n in rep.notes), rep.notes
