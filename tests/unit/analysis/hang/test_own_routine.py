"""The policy's own-routine rule (a pipeline stage read against its own earlier steps), asked by the two
sources that answer it: the ledger (``deadlock.detect``, each rank's (op, line) calls, p2p ops included) and
gloo's dumps (tests/unit/postmortem/test_detect.py's stage dumps: entries, and a hole for each p2p op the op
ids count). Both ask one body, ``programs.off_routine``. The ledger's run directories here are the stages of
tests/frjobs/stagejob.py, hand-built (tests/builder.py): every step rank 0 sends (line 29), rank 1 receives
(31) and sends on (33), rank 2 receives (35), then all three all-reduce (38) and meet at a barrier (40)."""

from __future__ import annotations

from pathlib import Path

import pytest
from builder import RunBuilder, pending

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.hang import deadlock
from ddpdoctor.analysis.hang.programs import OwnReading, off_routine
from ddpdoctor.record.reader import load_run

P2P_OPS = {0: [("send", 29)], 1: [("recv", 31), ("send", 33)], 2: [("recv", 35)]}
PEER = {0: 1, 1: 0, 2: 1}
STEP = [("all_reduce", 38), ("barrier", 40)]


def _stages(root: Path, step3: dict[int, list[tuple[str, int]]]) -> RunBuilder:
    """Steps 0-2 whole on every rank, then each rank's calls of step 3 (``step3``), its last one pending; the
    monitor stopped the run (a certain verdict)."""
    b = RunBuilder(root)
    for r in P2P_OPS:
        b.add(r, "events.jsonl", "start", 0.0, pid=999999, local_rank=r)
        b.add(r, "events.jsonl", "init", 0.1, global_rank=r, world_size=3, backend="gloo")
    for r, p2p in P2P_OPS.items():
        calls = (p2p + STEP) * 3 + step3[r]
        for seq, (op, line) in enumerate(calls, 1):
            shapes = () if op in ("send", "recv") else ((4,),)
            if seq < len(calls):
                b.coll(r, seq, line, op=op, shapes=shapes, t=1.0 + seq / 100)
                continue
            p = pending(op, seq, line, 2.0, shapes)
            if op in ("send", "recv"):
                p["peer"] = PEER[r]
            b.hb(r, 2.1, seq - 1, p, where=line).hb(r, 5.0, seq - 1, p, where=line)
    return b.add(None, "monitor.jsonl", "verdict", 5.0, mode="certain", reason="x")


def _finding(b: RunBuilder):
    fs = deadlock.detect(load_run(str(b.root)), Config(timeout=10.0))
    assert fs, "no finding"
    f = fs[0]
    return f.id, f.culprits, {(l.rank, l.line, l.role) for l in f.locations}


def test_the_ledger_names_the_stage_that_left_out_its_send_at_that_send(tmp_path):
    # rank 1 does not send on at step 3: rank 2 waits in its receive, ranks 0 and 1 in the step's all-reduce
    step3 = {0: [("send", 29), ("all_reduce", 38)], 1: [("recv", 31), ("all_reduce", 38)], 2: [("recv", 35)]}
    fid, culprits, locs = _finding(_stages(tmp_path / "run", step3))
    assert (fid, culprits) == ("hang.rank-conditional-collective", (1,))
    assert (1, 33, "skipped this call") in locs and (2, 35, "victim") in locs and (0, 38, "victim") in locs


def test_the_ledger_names_the_stage_that_all_reduced_once_more_at_its_extra_call(tmp_path):
    # rank 1's extra all-reduce (line 37) met the others' step all-reduce: the ledger's walk over positions
    # reads it before the stage's own routine is asked (its line is one no other rank reaches)
    step3 = {
        0: [("send", 29), ("all_reduce", 38), ("barrier", 40)],
        1: [("recv", 31), ("send", 33), ("all_reduce", 37), ("all_reduce", 38)],
        2: [("recv", 35), ("all_reduce", 38), ("barrier", 40)],
    }
    fid, culprits, locs = _finding(_stages(tmp_path / "run", step3))
    assert (fid, culprits) == ("hang.rank-conditional-collective", (1,))
    assert any(l[:2] == (1, 37) for l in locs), locs


MIDDLE = [("recv", 31), ("send", 33), *STEP]
FIRST = [("send", 29), *STEP]


@pytest.mark.parametrize(
    ("calls", "got"),
    [
        # one rank off its routine, the others where theirs has them
        (
            {0: FIRST * 3 + FIRST[:2], 1: MIDDLE * 3 + [("recv", 31), ("all_reduce", 38)]},
            (1, OwnReading("skipped", ("send", 33), 13)),
        ),
        (
            {0: FIRST * 4, 1: MIDDLE * 3 + [("recv", 31), ("send", 33), ("all_reduce", 37), ("all_reduce", 38)]},
            (1, OwnReading("extra", ("all_reduce", 37), 14)),
        ),
        # every rank where its routine has it; two ranks off theirs; a rank whose calls are unknown
        ({0: FIRST * 4, 1: MIDDLE * 4}, None),
        (
            {0: FIRST * 3 + [("all_reduce", 38)], 1: MIDDLE * 3 + [("recv", 31), ("all_reduce", 38)]},
            None,
        ),
        ({0: None, 1: MIDDLE * 3 + [("recv", 31), ("all_reduce", 38)]}, None),
    ],
    ids=["skipped", "extra", "all-ok", "two-off", "unknown"],
)
def test_the_one_rank_off_its_routine(calls, got):
    assert off_routine(calls) == got
