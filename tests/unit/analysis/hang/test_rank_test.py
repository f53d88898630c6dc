"""The policy's rank-test rule (``judge.rank_test``, one body), asked by the sources that answer it, on hand-built
run directories of one script (tests/builder.py): the collective ledger of a run ``ddpdoctor hang`` stopped
(``deadlock.detect``) and the stacks ``ddpdoctor attach`` took (``attach.detect``); the flight recorder's dumps
ask it too (tests/unit/postmortem/test_gloo_evidence.py, on real dumps; below, on hand-built ones). Rank 0 waits in a barrier it reached under
``if rank == 0:`` while rank 1 went on without it (it ended, or it sits elsewhere): both sources name rank 0
at the barrier's line. Without the rank test the same waits name rank 1, the rank that left."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from builder import RunBuilder, pending

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.hang import attach, deadlock
from ddpdoctor.postmortem import inputs, report
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


# The ledger's extra-call rule (attribution.attribute: every rank holds a call at the divergence) asks the same
# rule over the same reading of the way to each rank's call (paths.rank_test_of) as its rank-test rule above.

HELPER = """import torch.distributed as dist


def log(x):
    dist.broadcast(x, 0)


def main(rank, x):
    dist.all_reduce(x)
    if rank == 0:
        log(x)
    dist.barrier()
    return x


main(0, None)
"""
IN_LOG, HELPER_TEST, HELPER_CALL, HELPER_BARRIER, HELPER_COMMON = 5, 10, 11, 12, 9


def _ledger_calls(tmp: Path, text: str, common: int, calls: dict[int, tuple[str, int, str]]) -> list:
    """Both ranks all-reduce at ``common`` (#1); then each rank makes its own call at #2 (op, line, function)
    and waits in it until the monitor stops the run."""
    script = _script(tmp, text)
    b = RunBuilder(tmp / "run", script=script)
    for r, (op, line, func) in calls.items():
        b.start(r)
        shapes = [] if op == "barrier" else [[4]]
        for seq, (o, ln, fn, sh) in enumerate([("all_reduce", common, "main", [[4]]), (op, line, func, shapes)], 1):
            b.add(r, "ledger.jsonl", "coll", seq, op=o, group="0", seq=[seq, seq], shapes=sh,
                  dtypes=["float32"] * len(sh), site=[script, ln, fn], t0=seq, t1=seq, err=None)  # fmt: skip
        p = dict(pending(op, 2, line, 2.0, [tuple(s) for s in shapes]), site=[script, line, func])
        b.hb(r, 2.1, 2, p, where=line).hb(r, 4.0, 2, p, where=line)
    b.add(None, "monitor.jsonl", "verdict", 4.0, mode="certain", reason="ranks 0 and 1 wait")
    got = deadlock.detect(load_run(str(b.root)), CFG)
    return [(f.id, f.culprits, {l.line for l in f.locations if l.rank in f.culprits}) for f in got]


def test_the_extra_call_rule_names_the_rank_a_helper_call_under_the_rank_test_led_to_its_call(tmp_path):
    """Rank 0 waits in the broadcast inside ``log``, which it called under ``if rank == 0:``; rank 1 waits in
    the barrier after it. Rank 0 is the culprit at the broadcast, with the rank test and the call into the
    helper that led it there."""
    got = _ledger_calls(
        tmp_path, HELPER, HELPER_COMMON, {0: ("broadcast", IN_LOG, "log"), 1: ("barrier", HELPER_BARRIER, "main")}
    )
    assert got == [("hang.rank-conditional-collective", (0,), {IN_LOG, HELPER_TEST, HELPER_CALL})]


def test_the_ledger_names_the_rank_a_helper_call_under_the_rank_test_led_to_its_wait(tmp_path):
    """Chosen where the ledger's two rules differed: the extra-call rule read the call into the helper under
    the rank test, the rank-test rule (a rank ended) only the call's line and a stack the record did not hold,
    and named rank 1, which finished, as an early exit. Rank 0 waits in the broadcast only ``if rank == 0:``
    led it to: it is the culprit at the broadcast's line."""
    script = _script(tmp_path, HELPER)
    b = RunBuilder(tmp_path / "run", script=script).start(0).start(1)
    for r in (0, 1):
        b.add(r, "ledger.jsonl", "coll", 1.0, op="all_reduce", group="0", seq=[1, 1], shapes=[[4]],
              dtypes=["float32"], site=[script, HELPER_COMMON, "main"], t0=1.0, t1=1.0, err=None)  # fmt: skip
    b.finish(1, 1.5, seq=1)
    p = dict(pending("broadcast", 2, IN_LOG, 2.0), site=[script, IN_LOG, "log"])
    b.hb(0, 2.1, 2, p, where=IN_LOG).hb(0, 4.0, 2, p, where=IN_LOG)
    b.add(None, "monitor.jsonl", "verdict", 4.0, mode="certain", reason="rank 0 waits; rank 1 has exited")
    got = [(f.id, f.culprits, {l.line for l in f.locations if l.rank in f.culprits}) for f in
           deadlock.detect(load_run(str(b.root)), CFG)]  # fmt: skip
    assert got == [("hang.rank-conditional-collective", (0,), {IN_LOG})]


def test_the_extra_call_rule_reads_a_rank_test_around_the_whole_step_as_every_ranks(tmp_path):
    """Chosen where the sources differed: the stacks named rank 0 (above), the ledger's extra-call rule named
    nobody (suspects) because rank 1's all-reduce sits under ``if local_rank != -1:`` too. That test's branch
    holds rank 0's ``if rank == 0:``: it is every rank's, and the test that parts them is rank 0's."""
    got = _ledger_calls(
        tmp_path,
        WRAPPED,
        WRAPPED_BARRIER - 2,
        {0: ("barrier", WRAPPED_BARRIER, "main"), 1: ("all_reduce", WRAPPED_NEXT, "main")},
    )
    assert got == [("hang.rank-conditional-collective", (0,), {WRAPPED_BARRIER, WRAPPED_BARRIER - 1})]


def test_the_extra_call_rule_takes_no_rank_test_that_leaves_out_the_rank_that_got_there(tmp_path):
    """Chosen where the sources differed: the extra-call rule took any rank test around a rank's call; the
    rank-test rule (every source's) takes none that leaves that rank out. Rank 0 waits at a line under
    ``if rank == 1:`` (the file changed since the job ran): the test says nothing of rank 0's way there, and
    with nothing else to tell the two calls apart both ranks are suspects."""
    changed = GUARDED.replace("rank == 0", "rank == 1")
    got = _ledger_calls(tmp_path, changed, COMMON, {0: ("barrier", BARRIER, "main"), 1: ("all_reduce", RETURN, "main")})
    assert got[0][:2] == ("hang.divergent-collective", ())


# Where the rank the test did not lead there had made that call before, the test did not keep it out of the call:
# every source asks its records (``reached``), the ledger's extra-call rule and the dumps too.

LEFT = """import torch.distributed as dist


def main(rank, x):
    for step in range(10):
        dist.all_reduce(x)
        if rank == 1 or step == 0:
            dist.broadcast(x, 0)
        if rank == 0 and step == 1:
            break
    dist.barrier()
    return x


main(0, None)
"""
LEFT_REDUCE, LEFT_CAST, LEFT_BARRIER = 6, 8, 11
# both ranks: step 0 all-reduces (#1) and broadcasts (#2), step 1 all-reduces (#3); then rank 1 broadcasts (#4)
# under the test that every rank took at step 0, and rank 0, which broke out of the loop, waits in the barrier
LEFT_CALLS = {
    r: [("all_reduce", LEFT_REDUCE), ("broadcast", LEFT_CAST), ("all_reduce", LEFT_REDUCE), last]
    for r, last in ((0, ("barrier", LEFT_BARRIER)), (1, ("broadcast", LEFT_CAST)))
}


def test_the_extra_call_rule_names_no_rank_under_a_test_the_others_took_before(tmp_path):
    """Chosen where the sources differed: the extra-call rule read the rank test alone and named rank 1 at its
    broadcast; the rank-test rule (the ledger's where a rank ended, and the dumps' below) asks whether the
    others made that call before. Rank 0 broadcast at that line at step 0: the test did not keep it out, and
    rank 0 is the rank that left the loop. The rule after it names rank 0, whose barrier is a line no other
    rank reached."""
    script = _script(tmp_path, LEFT)
    b = RunBuilder(tmp_path / "run", script=script)
    for r, calls in LEFT_CALLS.items():
        b.start(r)
        for s, (op, line) in enumerate(calls, 1):
            sh = [] if op == "barrier" else [[4]]
            b.add(r, "ledger.jsonl", "coll", float(s), op=op, group="0", seq=[s, s], shapes=sh,
                  dtypes=["float32"] * len(sh), site=[script, line, "main"], t0=float(s), t1=float(s), err=None)  # fmt: skip
        op, line = calls[-1]
        p = dict(pending(op, 4, line, 4.0, () if op == "barrier" else ((4,),)), site=[script, line, "main"])
        b.hb(r, 4.1, 4, p, where=line).hb(r, 6.0, 4, p, where=line)
    b.add(None, "monitor.jsonl", "verdict", 6.0, mode="certain", reason="ranks 0 and 1 wait")
    (got,) = deadlock.detect(load_run(str(b.root)), CFG)
    assert (got.culprits, {l.line for l in got.locations if l.rank == 0}) == ((0,), {LEFT_BARRIER})


def _dump_entry(i: int, op: str, line: int, script: str) -> dict:
    """Entry ``i`` (#i+1 of the default group) of a gloo pickle dump, made at ``line`` of ``script``."""
    return {
        "record_id": i, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": i + 1,
        "p2p_seq_id": 0, "op_id": i + 1, "profiling_name": f"gloo:{op}", "is_p2p": False,
        "input_sizes": [[4]], "output_sizes": [[4]], "input_dtypes": ["Float"], "output_dtypes": ["Float"],
        "state": "scheduled", "retired": False, "time_created_ns": 1_000_000_000 * (i + 1), "timeout_ms": 60000,
        "frames": [
            {"name": op, "filename": f"{_TORCH}/distributed/distributed_c10d.py", "line": 3000},
            {"name": "main", "filename": script, "line": line},
        ],
    }  # fmt: skip


def test_the_dumps_name_no_rank_under_a_test_the_others_took_before(tmp_path):
    """Chosen where the sources differed: the dumps read the rank test alone and named rank 1 at its broadcast;
    the ledger asks whether the others made that call before. Rank 0's dump holds its broadcast at that line at
    #2: the test did not keep it out. Rank 0 went on to a call no rank made before and rank 1 continues the calls
    both made: either rank 0 left the loop, or rank 1 made an extra call earlier; the dumps name no culprit."""
    script = _script(tmp_path / "job", LEFT)
    for r, calls in LEFT_CALLS.items():
        d = {
            "version": "2.10",
            "entries": [_dump_entry(i, op, line, script) for i, (op, line) in enumerate(calls)],
            "pg_config": {"": {"desc": "", "name": "", "ranks": "[0, 1]"}},
            "pg_status": {
                "0": {"last_enqueued_collective": 4, "last_started_collective": -1, "last_completed_collective": 3}
            },
        }
        (tmp_path / f"rank_{r}").write_bytes(pickle.dumps(d))
    rep = report.build(inputs.load([str(tmp_path / "rank_0"), str(tmp_path / "rank_1")]), Config())
    f = rep.findings[0]
    assert (f.id, f.culprits, {l.line for l in f.locations}) == (
        "hang.divergent-collective",
        (),
        {LEFT_BARRIER, LEFT_CAST},
    )
