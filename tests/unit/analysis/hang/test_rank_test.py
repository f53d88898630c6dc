"""The policy's rank-test rule (``judge.rank_test``, one body), asked by the sources that answer it, on hand-built
run directories of one script (tests/builder.py): the collective ledger of a run ``ddpdoctor hang`` stopped
(``deadlock.detect``) and the stacks ``ddpdoctor attach`` took (``attach.detect``); the flight recorder's dumps
ask it too (tests/unit/postmortem/test_gloo_evidence.py, on real dumps). Rank 0 waits in a barrier it reached under
``if rank == 0:`` while rank 1 went on without it (it ended, or it sits elsewhere): both sources name rank 0
at the barrier's line. Without the rank test the same waits name rank 1, the rank that left."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builder import RunBuilder, pending

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.hang import attach, deadlock
from ddpdoctor.record.reader import load_run

CFG = Config(timeout=10.0)

GUARDED = """import torch.distributed as dist


def main(rank, x):
    dist.all_reduce(x)
    if rank == 0:
        dist.barrier()
    return x


main(0, None)
"""
PLAIN = GUARDED.replace("    if rank == 0:\n        dist.barrier()\n", "    dist.barrier()\n    pass\n")
COMMON, BARRIER, RETURN = 5, 7, 8  # in PLAIN the barrier is at line 6
_TORCH = "/venv/lib/python3.11/site-packages/torch"
_IN_BARRIER = [
    [f"{_TORCH}/distributed/c10d_logger.py", 83, "wrapper"],
    [f"{_TORCH}/distributed/distributed_c10d.py", 5356, "barrier"],
]


def _script(tmp: Path, text: str) -> str:
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "train.py"
    path.write_text(text)
    return str(path)


def _ledger(
    tmp: Path, text: str, barrier: int, rank1_made_it: bool = False, ended: bool = False
) -> list[tuple[str, tuple, set]]:
    """Both ranks all-reduce at COMMON (#1); rank 1 then finishes, rank 0 waits in the barrier (#2) until
    the monitor stops the run. ``rank1_made_it``: rank 1's ledger holds that barrier's line from before.
    ``ended``: the stop reached rank 0 as a transport error, and its last beat (its end) has no pending call:
    only its ledger says it waited in the barrier."""
    script = _script(tmp, text)
    b = RunBuilder(tmp / "run", script=script).start(0).start(1)
    site = [script, COMMON, "main"]
    for r in (0, 1):
        b.add(r, "ledger.jsonl", "coll", 1.0, op="all_reduce", group="0", seq=[1, 1], shapes=[[4]],
              dtypes=["float32"], site=site, t0=1.0, t1=1.0, err=None)  # fmt: skip
    if rank1_made_it:
        b.add(1, "ledger.jsonl", "coll", 0.5, op="barrier", group="0", seq=[0, 0], shapes=[], dtypes=[],
              site=[script, barrier, "main"], t0=0.5, t1=0.5, err=None)  # fmt: skip
    b.finish(1, 1.5, seq=1)
    p = dict(pending("barrier", 2, barrier, 2.0, ()), site=[script, barrier, "main"])
    b.hb(0, 2.1, 2, p, where=barrier).hb(0, 4.0, 2, p, where=barrier)
    b.add(None, "monitor.jsonl", "verdict", 4.0, mode="certain", reason="rank 0 waits; rank 1 has exited")
    if ended:
        b.add(0, "ledger.jsonl", "coll", 2.0, op="barrier", group="0", seq=[2, 2], shapes=[], dtypes=[],
              site=[script, barrier, "main"], st="issued")  # fmt: skip
        b.hb(0, 4.5, 2, None, where=barrier, final=True)
        msg = "[../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:1"
        (b.root / "ranks" / "0" / "error.json").write_text(
            json.dumps({"type": "RuntimeError", "message": msg, "frames": [], "user_frame": [script, barrier, "main"]})
        )
        b.finish(0, 4.6, code=1, seq=2, exception=True)
    got = deadlock.detect(load_run(str(b.root)), CFG)
    return [(f.id, f.culprits, {l.line for l in f.locations if l.rank in f.culprits}) for f in got]


def _stacks(tmp: Path, text: str, barrier: int, rank1: int | None) -> list[tuple[str, tuple, set]]:
    """``attach`` of the two ranks: rank 0 in the barrier; rank 1 idle at line ``rank1``, or gone (None)."""
    script = _script(tmp, text)
    b = RunBuilder(tmp / "run", script=script, command="attach", attach={"interval": 1.0})
    where = {0: (barrier, _IN_BARRIER)} | ({1: (rank1, [])} if rank1 is not None else {})
    for r in (0, 1):
        b.add(r, "events.jsonl", "start", 1.0, pid=1000 + r, local_rank=r)
        b.add(r, "events.jsonl", "init", 1.0, world_size=2)
        if r not in where:
            b.add(r, "events.jsonl", "gone", 1.0, world_size=2)
            continue
        line, frames = where[r]
        stack = [[script, 11, "<module>"], [script, line, "main"], *frames]
        thread = {"main": True, "name": "MainThread", "stack": stack}
        b.add(r, "stacks.jsonl", "stacks", 2.0, threads=[thread], moved=False, cpu=0.0)
    got = attach.detect(load_run(str(b.root)), CFG)
    return [(f.id, f.culprits, {l.line for l in f.locations if l.rank in f.culprits}) for f in got]


def test_the_ledger_names_the_rank_waiting_under_the_rank_test(tmp_path):
    assert _ledger(tmp_path, GUARDED, BARRIER) == [("hang.rank-conditional-collective", (0,), {BARRIER})]


def test_the_ledger_names_the_rank_under_the_rank_test_that_the_stop_ended_in_its_wait(tmp_path):
    """The stop ended rank 0 in the barrier (a transport error: its peer's node went away, as on two nodes of
    tests/e2e/test_realistic_hangs.py): its end has no pending call, its ledger still holds the barrier it
    waited in. It once read as rank 1's early exit."""
    assert _ledger(tmp_path, GUARDED, BARRIER, ended=True) == [("hang.rank-conditional-collective", (0,), {BARRIER})]


def test_the_ledger_names_the_rank_that_left_where_no_rank_test_leads_to_the_wait(tmp_path):
    (got,) = _ledger(tmp_path, PLAIN, BARRIER - 1)
    assert got[:2] == ("hang.early-exit", (1,))


def test_the_ledger_names_the_rank_that_left_where_it_had_made_the_tested_call_itself(tmp_path):
    """Rank 1's ledger holds the barrier's line: the rank test did not keep it out of the call."""
    (got,) = _ledger(tmp_path, GUARDED, BARRIER, rank1_made_it=True)
    assert got[:2] == ("hang.early-exit", (1,))


@pytest.mark.parametrize("rank1", [None, RETURN], ids=["rank-1-gone", "rank-1-elsewhere"])
def test_the_stacks_name_the_rank_waiting_under_the_rank_test(tmp_path, rank1):
    (got,) = _stacks(tmp_path, GUARDED, BARRIER, rank1)
    assert got == ("hang.rank-conditional-collective", (0,), {BARRIER})


def test_the_stacks_name_the_rank_that_left_where_no_rank_test_leads_to_the_wait(tmp_path):
    (got,) = _stacks(tmp_path, PLAIN, BARRIER - 1, None)
    assert got[:2] == ("hang.early-exit", (1,))


# Where the sources decided differently, the one rule (judge.rank_test) decides for all of them.

AFTER = """import torch.distributed as dist


def main(rank, x):
    dist.all_reduce(x)
    if rank == 0:
        dist.barrier()
    dist.all_reduce(x)
    return x


main(0, None)
"""
NEXT = 8  # AFTER's all-reduce after the rank test
IFELSE = GUARDED.replace(
    "        dist.barrier()\n", "        dist.barrier()\n    else:\n        dist.all_gather([x], x)\n"
)
OTHER_SIDE = 9  # IFELSE's all_gather, under the rank test's else
WRAPPED = """import torch.distributed as dist


def main(rank, x, local_rank):
    if local_rank != -1:
        dist.all_reduce(x)
        if rank == 0:
            dist.barrier()
        dist.all_reduce(x)
    return x


main(0, None, 0)
"""
WRAPPED_BARRIER, WRAPPED_NEXT = 8, 9


def _in(op: str) -> list[list]:
    """The frames of a stack inside torch.distributed's ``op``."""
    return [
        [f"{_TORCH}/distributed/c10d_logger.py", 83, "wrapper"],
        [f"{_TORCH}/distributed/distributed_c10d.py", 5000, op],
    ]


def _ledger3(tmp: Path) -> list[tuple[str, tuple, set]]:
    """Three ranks of AFTER all-reduce at COMMON (#1); rank 1 then finishes, rank 0 waits in the barrier under
    the rank test (#2) and rank 2 in the all-reduce after it (#2, at NEXT), until the monitor stops the run."""
    script = _script(tmp, AFTER)
    b = RunBuilder(tmp / "run", script=script)
    for r in (0, 1, 2):
        b.add(r, "events.jsonl", "start", 0.0, pid=999999, local_rank=r)
        b.add(r, "events.jsonl", "init", 0.1, global_rank=r, world_size=3, backend="gloo")
        b.add(r, "ledger.jsonl", "coll", 1.0, op="all_reduce", group="0", seq=[1, 1], shapes=[[4]],
              dtypes=["float32"], site=[script, COMMON, "main"], t0=1.0, t1=1.0, err=None)  # fmt: skip
    b.finish(1, 1.5, seq=1)
    for r, op, line in ((0, "barrier", BARRIER), (2, "all_reduce", NEXT)):
        p = dict(pending(op, 2, line, 2.0, () if op == "barrier" else ((4,),)), site=[script, line, "main"])
        b.hb(r, 2.1, 2, p, where=line).hb(r, 4.0, 2, p, where=line)
    b.add(None, "monitor.jsonl", "verdict", 4.0, mode="certain", reason="rank 0 waits; rank 1 has exited")
    got = deadlock.detect(load_run(str(b.root)), CFG)
    return [(f.id, f.culprits, {l.line for l in f.locations if l.rank in f.culprits}) for f in got]


def _stacks_at(tmp: Path, text: str, where: dict[int, tuple[int, str | None]]) -> list[tuple[str, tuple, set]]:
    """``attach`` of ranks stuck at their lines: in the op given, or idle there (None)."""
    script = _script(tmp, text)
    b = RunBuilder(tmp / "run", script=script, command="attach", attach={"interval": 1.0})
    for r, (line, op) in where.items():
        b.add(r, "events.jsonl", "start", 1.0, pid=1000 + r, local_rank=r)
        b.add(r, "events.jsonl", "init", 1.0, world_size=len(where))
        stack = [[script, text.count("\n"), "<module>"], [script, line, "main"], *(_in(op) if op else [])]
        thread = {"main": True, "name": "MainThread", "stack": stack}
        b.add(r, "stacks.jsonl", "stacks", 2.0, threads=[thread], moved=False, cpu=0.0)
    got = attach.detect(load_run(str(b.root)), CFG)
    return [(f.id, f.culprits, {l.line for l in f.locations if l.rank in f.culprits}) for f in got]


def test_the_ledger_names_the_rank_under_the_rank_test_while_another_waits_at_a_line_without_one(tmp_path):
    """Chosen where the sources differed: the ledger named rank 1, which left, as an early exit unless every
    waiting rank's call sat under a rank test; the stacks named rank 0. Rank 0's barrier can never complete
    whatever rank 1 does (neither rank 1 nor rank 2 takes ``if rank == 0:``): rank 0 is the culprit at its
    line, and rank 2 waits for it."""
    assert _ledger3(tmp_path) == [("hang.rank-conditional-collective", (0,), {BARRIER})]


def test_the_stacks_name_the_rank_under_the_rank_test_while_another_waits_at_a_line_without_one(tmp_path):
    got = _stacks_at(tmp_path, AFTER, {0: (BARRIER, "barrier"), 1: (RETURN + 1, None), 2: (NEXT, "all_reduce")})
    assert got == [("hang.rank-conditional-collective", (0,), {BARRIER})]


def test_the_stacks_name_no_side_of_an_if_else_on_the_rank(tmp_path):
    """Chosen where the sources differed: the stacks named rank 0, the lowest rank under a rank test; the dumps
    and the ledger named no side where each side's call sits under one. Rank 0 waits in the barrier under
    ``if rank == 0:`` and rank 1 in the all_gather under its ``else:``: each side took its own branch of the
    same test, which names neither; the ranks wait in different collectives."""
    (got,) = _stacks_at(tmp_path, IFELSE, {0: (BARRIER, "barrier"), 1: (OTHER_SIDE, "all_gather")})
    assert got == ("hang.divergent-collective", (0, 1), {BARRIER, OTHER_SIDE})


def test_a_rank_test_around_the_whole_step_is_every_ranks_not_the_other_sides(tmp_path):
    """``if local_rank != -1:`` around the step leads rank 1 to its all-reduce as it leads rank 0 to the
    barrier under ``if rank == 0:`` inside it: the test that parts them is rank 0's."""
    got = _stacks_at(tmp_path, WRAPPED, {0: (WRAPPED_BARRIER, "barrier"), 1: (WRAPPED_NEXT, "all_reduce")})
    assert got == [("hang.rank-conditional-collective", (0,), {WRAPPED_BARRIER})]
