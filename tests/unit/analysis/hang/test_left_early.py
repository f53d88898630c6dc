"""Which rank left the loop the others are still in (``paths.departed``) and where it took its way out
(``exits.rank_exits``), one body each, asked by the sources that answer them, on hand-built run directories of one script (tests/builder.py): the
collective ledger of a run ``ddpdoctor hang`` stopped (``deadlock.detect``: rank 1 finished and kept no stack)
and the stacks ``ddpdoctor attach`` took (``attach.detect``: rank 1 is gone). Rank 0 waits in the loop's
all-reduce; the loop is left by a break every rank takes at the last step and by a break under a rank test.
Both sources name rank 1, and the way out the rank test lets it take."""

from __future__ import annotations

from pathlib import Path

import pytest
from builder import RunBuilder, pending

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.hang import attach, deadlock
from ddpdoctor.record.reader import load_run

CFG = Config(timeout=10.0)

LOOP = """import torch.distributed as dist


def main(rank, x):
    for step in range(10):
        dist.all_reduce(x)
        if step > 8:
            break
        if rank == 1 and step == 3:
            break
    return x


main(1, None)
"""
REDUCE, EVERY_RANKS_BREAK, RANK_BREAK, MODULE = 6, 8, 10, 14
ITS_OWN = LOOP  # rank 1's break is under `if rank == 1 ...`
NOT_ITS = LOOP.replace("rank == 1", "rank == 0")  # the tested break is rank 0's: rank 1 left by the other one
_TORCH = "/venv/lib/python3.11/site-packages/torch"


def _script(tmp: Path, text: str) -> str:
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "train.py"
    path.write_text(text)
    return str(path)


def _ways(findings: list) -> list[tuple[str, tuple, set]]:
    """Each finding: its id, culprits, and the culprits' ways out (line, role)."""
    return [
        (f.id, f.culprits, {(l.line, l.role) for l in f.locations if l.rank in f.culprits and "loop here" in l.role})
        for f in findings
    ]


def _ledger(tmp: Path, text: str) -> list[tuple[str, tuple, set]]:
    """Both ranks all-reduce three times in the loop (#1-#3), seen by torch's recorder (``src: flight``: the
    ledger then guesses where a finished rank left from the loops, as where its last collective was torch's
    own); rank 1 then finishes, rank 0 waits in #4 until the monitor stops the run."""
    script = _script(tmp, text)
    b = RunBuilder(tmp / "run", script=script).start(0).start(1)
    for r in (0, 1):
        for s in (1, 2, 3):
            b.add(r, "ledger.jsonl", "coll", float(s), op="all_reduce", group="0", seq=[s, s], shapes=[[4]],
                  dtypes=["float32"], site=[script, REDUCE, "main"], t0=float(s), t1=float(s), err=None, src="flight")  # fmt: skip
    b.finish(1, 3.5, seq=3)
    p = dict(pending("all_reduce", 4, REDUCE, 4.0), site=[script, REDUCE, "main"])
    b.hb(0, 4.1, 4, p, where=REDUCE).hb(0, 6.0, 4, p, where=REDUCE)
    b.add(None, "monitor.jsonl", "verdict", 6.0, mode="certain", reason="rank 0 waits; rank 1 has exited")
    return _ways(deadlock.detect(load_run(str(b.root)), CFG))


def _stacks(tmp: Path, text: str) -> list[tuple[str, tuple, set]]:
    """``attach`` of the two ranks: rank 0 in the loop's all-reduce, rank 1 gone."""
    script = _script(tmp, text)
    b = RunBuilder(tmp / "run", script=script, command="attach", attach={"interval": 1.0})
    for r in (0, 1):
        b.add(r, "events.jsonl", "start", 1.0, pid=1000 + r, local_rank=r)
        b.add(r, "events.jsonl", "init", 1.0, world_size=2)
    b.add(1, "events.jsonl", "gone", 1.0, world_size=2)
    stack = [
        [script, MODULE, "<module>"],
        [script, REDUCE, "main"],
        [f"{_TORCH}/distributed/c10d_logger.py", 83, "wrapper"],
        [f"{_TORCH}/distributed/distributed_c10d.py", 2800, "all_reduce"],
    ]
    thread = {"main": True, "name": "MainThread", "stack": stack}
    b.add(0, "stacks.jsonl", "stacks", 2.0, threads=[thread], moved=False, cpu=0.0)
    return _ways(attach.detect(load_run(str(b.root)), CFG))


SOURCES = pytest.mark.parametrize("read", [_ledger, _stacks], ids=["ledger", "stacks"])


@SOURCES
def test_the_rank_that_left_took_the_way_out_its_rank_test_leads_to(tmp_path, read):
    """Chosen where the sources differed: the ledger named the rank-tested break, the stacks every break of the
    loop ("may have left"). Only rank 1 takes ``if rank == 1 and step == 3: break``; every rank takes the
    other one together."""
    assert read(tmp_path, ITS_OWN) == [("hang.early-exit", (1,), {(RANK_BREAK, "left the loop here")})]


@SOURCES
def test_a_rank_test_that_leaves_out_the_rank_that_left_is_not_its_way_out(tmp_path, read):
    """Chosen where the sources differed: the ledger named any rank-tested break (rank 0's
    ``if rank == 0 and step == 3: break`` for rank 1), the stacks every break. Rank 1 cannot have left by rank
    0's break: the way out left to it is the one under no rank test."""
    assert read(tmp_path, NOT_ITS) == [("hang.early-exit", (1,), {(EVERY_RANKS_BREAK, "left the loop here")})]


# A rank that left the loop and waits in the barrier after it: both sources read where it left from its stack
# beside the others' (paths.departure), and name its way out as above.

AFTER = LOOP.replace("    return x\n", "    dist.barrier()\n    return x\n")
BARRIER, AFTER_MODULE = 11, 15


def _stack(script: str, line: int, op: str, outer: list | None = None, func: str = "main") -> dict:
    """A main thread in torch's ``op`` at ``line`` of ``func``, below ``outer`` (its callers, outermost first;
    by default AFTER's module line)."""
    frames = [
        *(outer or [[script, AFTER_MODULE, "<module>"]]),
        [script, line, func],
        [f"{_TORCH}/distributed/c10d_logger.py", 83, "wrapper"],
        [f"{_TORCH}/distributed/distributed_c10d.py", 2800, op],
    ]
    return {"main": True, "name": "MainThread", "stack": frames}


WHERE = {0: ("all_reduce", REDUCE), 1: ("barrier", BARRIER)}  # rank 1 left the loop; rank 0 is still in it


def _ledger_after(tmp: Path, text: str = AFTER, where: dict | None = None, callers: dict | None = None) -> list:
    """Both ranks all-reduce three times in the loop (#1-#3); at #4 rank 0 waits in the loop's all-reduce and
    rank 1 in the barrier after the loop, with the stacks the monitor asked for at the verdict (``where``:
    each rank's op, line and function, ``callers``: each rank's frames above its own, outermost first)."""
    script = _script(tmp, text)
    b = RunBuilder(tmp / "run", script=script).start(0).start(1)
    for r, (op, line, *func) in (where or WHERE).items():
        shapes = [] if op == "barrier" else [[4]]
        for s, (o, ln, sh) in enumerate([*[("all_reduce", REDUCE, [[4]])] * 3, (op, line, shapes)], 1):
            b.add(r, "ledger.jsonl", "coll", float(s), op=o, group="0", seq=[s, s], shapes=sh,
                  dtypes=["float32"] * len(sh), site=[script, ln, "main"], t0=float(s), t1=float(s), err=None)  # fmt: skip
        p = dict(pending(op, 4, line, 4.0, [tuple(x) for x in shapes]), site=[script, line, "main"])
        b.hb(r, 4.1, 4, p, where=line).hb(r, 6.0, 4, p, where=line)
        b.add(r, "stacks.jsonl", "stacks", 6.0, threads=[_stack(script, line, op, (callers or {}).get(r), *func)])
    b.add(None, "monitor.jsonl", "verdict", 6.0, mode="certain", reason="ranks 0 and 1 wait")
    return _ways(deadlock.detect(load_run(str(b.root)), CFG))


def _stacks_after(tmp: Path, text: str = AFTER, where: dict | None = None, callers: dict | None = None) -> list:
    """``attach`` of the two ranks: rank 0 in the loop's all-reduce, rank 1 in the barrier after the loop (or as
    ``_ledger_after``'s arguments say)."""
    script = _script(tmp, text)
    b = RunBuilder(tmp / "run", script=script, command="attach", attach={"interval": 1.0})
    for r, (op, line, *func) in (where or WHERE).items():
        b.add(r, "events.jsonl", "start", 1.0, pid=1000 + r, local_rank=r)
        b.add(r, "events.jsonl", "init", 1.0, world_size=2)
        thread = _stack(script, line, op, (callers or {}).get(r), *func)
        b.add(r, "stacks.jsonl", "stacks", 2.0, threads=[thread], moved=False, cpu=0.0)
    return _ways(attach.detect(load_run(str(b.root)), CFG))


@pytest.mark.parametrize("read", [_ledger_after, _stacks_after], ids=["ledger", "stacks"])
def test_a_rank_waiting_after_the_loop_left_it_by_the_way_out_its_rank_test_leads_to(tmp_path, read):
    """Chosen where the sources agreed on every break of the loop ("may have left the loop here"): the rank
    that left is known, and only the rank-tested break is its own (as for a rank that finished, above)."""
    assert read(tmp_path) == [("hang.early-exit", (1,), {(RANK_BREAK, "left the loop here")})]


# Which rank left (``paths.departed``, one body): a rank that returned from the call the others are still inside
# (``main()``, whose loop it left by ``return``) and waits in the barrier after it, in ``outer()``.

RETURNS = """import torch.distributed as dist


def main(rank, x):
    for step in range(10):
        dist.all_reduce(x)
        if rank == 1 and step == 3:
            return x
    return x


def outer(rank, x):
    main(rank, x)
    dist.barrier()


outer(0, None)
"""
RETURN_LINE, CALL_MAIN, OUTER_BARRIER, RETURNS_MODULE = 8, 13, 14, 17


@pytest.mark.parametrize("read", [_ledger_after, _stacks_after], ids=["ledger", "stacks"])
def test_a_rank_that_returned_from_the_call_the_others_are_in_left_early(tmp_path, read):
    """Chosen where the sources differed: the ledger named rank 1, which returned early from ``main()``; the stacks
    asked only whether a rank left a loop and named both ranks as waiting in different collectives. Rank 1 left
    ``main()`` by the ``return`` under its rank test: an early exit at that line."""
    script = str(tmp_path / "train.py")
    module = [script, RETURNS_MODULE, "<module>"]
    callers = {0: [module, [script, CALL_MAIN, "outer"]], 1: [module]}  # rank 0 in main, called from outer
    where = {0: ("all_reduce", REDUCE, "main"), 1: ("barrier", OUTER_BARRIER, "outer")}
    got = read(tmp_path, RETURNS, where, callers)
    assert got == [("hang.early-exit", (1,), {(RETURN_LINE, "left the loop here")})]
