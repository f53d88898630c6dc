"""The live monitor's deadlock proof, pinned on hand-built run directories (tests/builder.py): the reason
line the monitor prints and stops the run on (``live_verdict``), for each way a peer proves a wait can never
complete (it exited, it waits in another call or position, it issued another call at that position, every
rank waits and they wait on different groups), and for the waits that prove nothing yet (not settled, a
stale heartbeat, a peer behind, a call torch's recorder saw that the peer's ledger cannot hold).

Each run: ranks that wait in their call since t=2.0, seen by heartbeats at t=2.1 and t=4.0, judged at t=4.0
(settle 1 s, stale 3 s). A pending call the wrappers saw and one torch's flight recorder saw (``source:
flight``, the default) are both pinned where their answers differ."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from builder import RunBuilder, pending

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.hang import judge
from ddpdoctor.analysis.hang.facts import ENDED, MISSING, RUNNING, WAITING, Call, RankFacts
from ddpdoctor.analysis.live import live_verdict
from ddpdoctor.record.reader import load_run

CFG = Config(timeout=10.0)


def _beat(b: RunBuilder, r: int, t: float, seq: dict[str, int], p: dict | None = None, **kw: Any) -> None:
    b.add(
        r,
        "heartbeat.jsonl",
        "hb",
        t,
        step=3,
        ncoll=sum(seq.values()),
        seq=seq,
        pending=p,
        where=["/work/train.py", 10, "main"],
        **{"in_backward": False, "in_ddp_forward": False, **kw},
    )


def _waits(b: RunBuilder, r: int, p: dict, seq: dict[str, int] | None = None, last: float = 4.0) -> None:
    """Rank ``r`` waits in ``p`` since its ``since``, seen at t=2.1 and at ``last``."""
    seq = seq or {str(p["group"]): int(p["seq"])}
    _beat(b, r, 2.1, seq, p)
    _beat(b, r, last, seq, p)


def _on(group: str, p: dict) -> dict:
    return dict(p, group=group)


def _verdict(b: RunBuilder, now: float = 4.0) -> tuple[str, str] | None:
    return live_verdict(load_run(str(b.root)), CFG, now)


def _job(tmp: Path, n: int = 2) -> RunBuilder:
    b = RunBuilder(tmp / "run")
    for r in range(n):
        b.start(r)
    return b


def test_a_peer_that_exited_proves_the_wait(tmp_path):
    b = _job(tmp_path)
    b.coll(0, 1, 20).coll(1, 1, 20).finish(1, 1.5, seq=1)
    _waits(b, 0, pending("all_reduce", 2, 20, 2.0))
    assert _verdict(b) == ("certain", "rank 0 waits 2.0 s in all_reduce(4); rank 1 has exited")


def test_a_peer_that_exited_after_the_waiters_last_look_proves_nothing_yet(tmp_path):
    """Rank 0's last heartbeat (t=4.0) is only 0.5 s after rank 1 ended: the call may have met it on its way."""
    b = _job(tmp_path)
    b.coll(0, 1, 20).coll(1, 1, 20).finish(1, 3.5, seq=1)
    _waits(b, 0, pending("all_reduce", 2, 20, 2.0))
    assert _verdict(b) is None


@pytest.mark.parametrize(
    ("theirs", "words"),
    [
        (pending("barrier", 5, 30, 2.0, ()), "rank 1 waits in barrier (#5)"),
        (pending("all_reduce", 5, 20, 2.0, ((8,),)), "rank 1 waits in all_reduce(8) (#5)"),
        (pending("all_reduce", 6, 20, 2.0), "rank 1 waits in all_reduce(4) (#6)"),
    ],
    ids=["another-op", "other-shapes", "another-position"],
)
def test_a_peer_waiting_in_another_call_proves_the_wait(tmp_path, theirs, words):
    b = _job(tmp_path)
    _waits(b, 0, pending("all_reduce", 5, 20, 2.0))
    _waits(b, 1, theirs)
    assert _verdict(b) == ("certain", f"rank 0 waits 2.0 s in all_reduce(4) (#5); {words}")


def test_every_rank_in_the_same_call_proves_nothing(tmp_path):
    b = _job(tmp_path)
    for r in (0, 1):
        _waits(b, r, pending("all_reduce", 5, 20 + r, 2.0))  # another line is the same call
    assert _verdict(b) is None


def test_a_peer_that_issued_another_call_at_that_position_proves_the_wait(tmp_path):
    b = _job(tmp_path)
    b.coll(1, 5, 31, op="broadcast")
    _beat(b, 1, 1.0, {"0": 6})
    _beat(b, 1, 4.0, {"0": 6})
    _waits(b, 0, pending("all_reduce", 5, 20, 2.0))
    assert _verdict(b) == (
        "certain",
        "rank 0 waits 2.0 s in all_reduce(4) (#5); rank 1 issued broadcast(4) at that position",
    )


def test_a_peer_that_issued_the_same_call_or_is_behind_proves_nothing(tmp_path):
    b = _job(tmp_path, 3)
    b.coll(1, 5, 20)
    _beat(b, 1, 1.0, {"0": 6})
    _beat(b, 1, 4.0, {"0": 6})
    _beat(b, 2, 1.0, {"0": 4})
    _beat(b, 2, 4.0, {"0": 4})
    _waits(b, 0, pending("all_reduce", 5, 20, 2.0))
    assert _verdict(b) is None


def _passed_with_no_python_call(tmp_path: Path, recorded: bool) -> RunBuilder:
    """Rank 1 went past #7 with no Python call there (DDP's all-reduce, from C++); rank 0 waits in a barrier
    at #7, which its wrappers (``recorded=False``) or torch's recorder (``recorded=True``) saw."""
    b = _job(tmp_path)
    p = pending("barrier", 7, 44, 2.0, ())
    if recorded:
        p = dict(p, source="flight")
    _beat(b, 0, 1.0, {"0": 6})
    _waits(b, 0, p)
    b.coll(1, 6, 40)
    _beat(b, 1, 1.0, {"0": 6})
    _beat(b, 1, 2.0, {"0": 9}, in_backward=True)
    _beat(b, 1, 4.0, {"0": 9})
    return b


def test_a_peer_past_the_position_without_a_python_call_there_proves_a_wrappers_wait(tmp_path):
    assert _verdict(_passed_with_no_python_call(tmp_path, recorded=False)) == (
        "certain",
        "rank 0 waits 2.0 s in barrier (#7); rank 1 issued a DDP all-reduce at that position",
    )


def test_a_peer_past_the_position_without_a_ledger_entry_proves_nothing_against_the_recorders_call(tmp_path):
    """Under the recorder (the default) the peer's ledger holds no collectives at all: its lack of one at #7
    is no DDP all-reduce there."""
    assert _verdict(_passed_with_no_python_call(tmp_path, recorded=True)) is None


def test_every_rank_waiting_on_different_groups_proves_the_wait(tmp_path):
    b = _job(tmp_path)
    both = {"0": 5, "1": 1}
    _waits(b, 0, _on("1", pending("all_reduce", 1, 25, 2.0)), both)
    _waits(b, 1, pending("all_reduce", 5, 20, 2.0), both)
    assert _verdict(b) == ("certain", "rank 0 waits 2.0 s in all_reduce(4) on group 1; rank 1 waits on group 0")


def test_a_rank_that_never_started_does_not_stop_the_proof_across_groups(tmp_path):
    b = _job(tmp_path, 3)  # rank 2: started, no heartbeat yet
    both = {"0": 5, "1": 1}
    _waits(b, 0, _on("1", pending("all_reduce", 1, 25, 2.0)), both)
    _waits(b, 1, pending("all_reduce", 5, 20, 2.0), both)
    assert _verdict(b) == ("certain", "rank 0 waits 2.0 s in all_reduce(4) on group 1; rank 1 waits on group 0")


def test_waits_on_different_groups_prove_nothing_while_a_rank_runs(tmp_path):
    b = _job(tmp_path, 3)
    both = {"0": 5, "1": 1}
    _waits(b, 0, _on("1", pending("all_reduce", 1, 25, 2.0)), both)
    _waits(b, 1, pending("all_reduce", 5, 20, 2.0), both)
    _beat(b, 2, 1.0, {"0": 4})
    _beat(b, 2, 4.0, {"0": 4})
    assert _verdict(b) is None


def test_a_wait_younger_than_the_settle_time_proves_nothing(tmp_path):
    b = _job(tmp_path)
    _waits(b, 0, pending("all_reduce", 5, 20, 2.0))
    _waits(b, 1, pending("barrier", 5, 30, 3.5, ()))  # rank 1's wait: 0.5 s
    assert _verdict(b) is None


def test_a_peer_whose_heartbeat_is_stale_proves_nothing(tmp_path):
    b = _job(tmp_path)
    _waits(b, 0, pending("all_reduce", 5, 20, 2.0), last=6.0)
    _waits(b, 1, pending("barrier", 5, 30, 2.0, ()), last=2.5)  # unresponsive since t=2.5
    assert _verdict(b, now=6.0) is None


@pytest.mark.parametrize(
    ("exited", "words"),
    [
        (1, "rank 0 waits 2.0 s in all_reduce(4); rank 1 has exited"),
        (2, "rank 0 waits 2.0 s in all_reduce(4) (#5); rank 1 waits in barrier (#5)"),
    ],
    ids=["exited-first", "waiting-first"],
)
def test_the_first_peer_in_rank_order_gives_the_reason(tmp_path, exited, words):
    b = _job(tmp_path, 3)
    other = 3 - exited
    b.finish(exited, 1.0, seq=4)
    _waits(b, 0, pending("all_reduce", 5, 20, 2.0))
    _waits(b, other, pending("barrier", 5, 30, 2.0, ()))
    assert _verdict(b) == ("certain", words)


# The rule itself, over hand-built facts: ranks 0 and 1 of group "0", rank 0 waiting in an all-reduce at #5
# (seen at t=10), the peer as each case has it.

AR = Call("all_reduce", "0", 5, key=("all_reduce", ((4,),), ("float32",)))


def _facts(peer: RankFacts, mine: Call = AR) -> dict[int, RankFacts]:
    return {0: RankFacts(0, WAITING, mine, {"0": mine.seq or 0}, seen=10.0), 1: peer}


def _never(q: int, c: Call) -> Call | None:
    raise AssertionError("a peer's history was read where its wait or its end decides")


@pytest.mark.parametrize(
    ("peer", "how"),
    [
        (RankFacts(1, ENDED, issued={"0": 4}, seen=8.0), judge.EXITED),
        (RankFacts(1, ENDED, issued={"0": 4}), judge.EXITED),  # its end time unknown
        (
            RankFacts(1, WAITING, dataclasses.replace(AR, op="barrier", key=("barrier", None, None)), {"0": 5}),
            judge.WAITS,
        ),
        (RankFacts(1, WAITING, dataclasses.replace(AR, seq=6), {"0": 6}), judge.WAITS),
        (RankFacts(1, WAITING, dataclasses.replace(AR, group="1", seq=1), {"0": 4, "1": 1}), judge.ELSEWHERE),
    ],
    ids=["ended", "ended-at-an-unknown-time", "another-op", "another-position", "another-group"],
)
def test_stranded_names_the_wait_and_the_peer_that_proves_it(peer, how):
    got = judge.stranded(_facts(peer), _never, margin=1.0)
    assert got is not None and (got.rank, got.peer, got.how) == (0, 1, how)


@pytest.mark.parametrize(
    "peer",
    [
        RankFacts(1, ENDED, issued={"0": 4}, seen=9.5),  # ended less than the margin before rank 0 was seen
        RankFacts(1, ENDED, issued={"1": 4}, seen=1.0),  # not a member of the group
        RankFacts(1, WAITING, AR, {"0": 5}),  # the same call
        RankFacts(1, RUNNING, issued={"0": 4}),  # behind: it may still come
        RankFacts(1, RUNNING, issued={"0": 7}, steady=False),  # past #5, but its counts moved within the settle time
        RankFacts(1, MISSING),
    ],
    ids=["ended-too-recently", "another-groups-member", "same-call", "behind", "not-steady", "missing"],
)
def test_stranded_proves_nothing(peer):
    assert judge.stranded(_facts(peer), _never, margin=1.0) is None


def test_stranded_proves_a_wait_on_another_group_only_while_no_rank_runs():
    other = RankFacts(1, WAITING, dataclasses.replace(AR, group="1", seq=1), {"0": 4, "1": 1})
    facts = {**_facts(other), 2: RankFacts(2, RUNNING, issued={"0": 4})}
    assert judge.stranded(facts, _never) is None


def test_stranded_reads_what_a_peer_past_the_position_issued_there():
    ahead = RankFacts(1, RUNNING, issued={"0": 7})
    other = Call("broadcast", "0", 5, key=("broadcast", ((4,),), ("float32",)))
    got = judge.stranded(_facts(ahead), lambda q, c: other)
    assert got == judge.Stranded(0, 1, judge.ISSUED, other)
    assert judge.stranded(_facts(ahead), lambda q, c: AR) is None  # it issued the same call there
    got = judge.stranded(_facts(ahead), lambda q, c: None)  # no Python call there: DDP's all-reduce
    assert got == judge.Stranded(0, 1, judge.ISSUED, None)
    # the waiting call is one torch's recorder saw: the peer's ledger holds no collectives, so no proof
    assert judge.stranded(_facts(ahead, dataclasses.replace(AR, recorder=True)), lambda q, c: None) is None


def test_stranded_leaves_p2p_ops_to_their_peers():
    recv = Call("recv", "0", 5, p2p=True, peer=("recv", 1))
    assert judge.stranded(_facts(RankFacts(1, ENDED, issued={"0": 4}), recv), _never) is None


def test_a_peer_in_backward_awaiting_the_recorders_bucket_all_reduce_at_the_position_proves_the_wait(tmp_path):
    """Under the recorder (the default) a peer in DDP's backward says, in its heartbeat, which call it awaits at
    which position (torch's recorder saw DDP's bucket all-reduce): that is the call it issued there, and a
    barrier at the same position can never meet it (probes/early_exit_some.py: proven at the timeout before)."""
    b = _job(tmp_path)
    _beat(b, 0, 1.0, {"0": 9})
    _waits(b, 0, dict(pending("barrier", 10, 44, 2.0, ()), source="flight"), {"0": 10})
    bucket = dict(pending("all_reduce", 10, 20, 2.0, ((14,),)), source="flight", site=None, n=1, sends=0)
    _beat(b, 1, 1.0, {"0": 9})
    _beat(b, 1, 2.1, {"0": 10}, in_backward=True, awaiting=bucket)
    _beat(b, 1, 4.0, {"0": 10}, in_backward=True, awaiting=bucket)
    verdict = _verdict(b)
    assert verdict is not None and verdict[0] == "certain", verdict
    assert verdict[1].startswith("rank 0 waits 2.0 s in barrier (#10); rank 1 issued "), verdict
