"""A straggler inside backward told by DDP's own timers (analysis/profile/backward.py): equal timers give
nothing; the rank that computes long while the others wait in their all-reduce is the culprit; ``add``
leaves a straggler already named alone."""

from __future__ import annotations

import timelines

from ddpdoctor.analysis.findings import Finding
from ddpdoctor.analysis.profile.backward import add, ddp_timers, detect
from ddpdoctor.record.reader import RankRecord, RunRecord

BWD = ("backward", "/w/train.py", 42, "main", 10, "loss.backward()")
SLOW_FN = ("backward", "/w/model.py", 17, "backward", 30, "return grad * weird(x)")


def _rank(r: int, compute: float, comm: float, rows: list) -> list[dict]:
    return timelines.steps(10, backward=45, rank=r) + [
        timelines.samples(rows, rank=r),
        timelines.info(rank=r, ddp={"backward_ms": compute, "comm_ms": comm, "overlap_ms": 0.0}),
    ]


def _record(tls: dict[int, list[dict]]) -> RunRecord:
    return RunRecord("/run", {"command": "profile"}, {r: RankRecord(r, timeline=tl) for r, tl in tls.items()}, [])


def test_ddp_timers_are_read_from_the_latest_profile_info() -> None:
    tl = [
        timelines.info(ddp={"backward_ms": 1.0, "comm_ms": 2.0}),
        timelines.info(ddp={"backward_ms": 3, "comm_ms": 4}),
    ]
    rec = _record({0: tl, 1: [timelines.info(ddp={"backward_ms": None})]})
    assert ddp_timers(rec) == {0: {"compute": 3.0, "comm": 4.0}}


def test_equal_backward_compute_is_no_straggler() -> None:
    rec = _record({r: _rank(r, 30.0, 15.0, [BWD]) for r in (0, 1, 2)})
    assert detect(rec) == []


def test_the_rank_that_computes_long_while_the_others_wait_is_the_culprit() -> None:
    rec = _record(
        {0: _rank(0, 10.0, 35.0, [BWD]), 1: _rank(1, 40.0, 5.0, [BWD, SLOW_FN]), 2: _rank(2, 10.0, 35.0, [BWD])}
    )
    (f,) = detect(rec)
    assert f.id == "profile.straggler" and f.culprits == (1,) and f.evidence["phase"] == "backward"
    assert f.message.startswith(
        "rank 1 is 30 ms/step slower than the others in backward (DDP's timers: backward compute 40.0 ms vs "
        "10.0 ms), at model.py:17 in backward (`return grad * weird(x)`"
    )
    assert f.message.endswith(
        "2 ranks [0,2] wait for it in DDP's gradient all-reduce at train.py:42 (`loss.backward()`), +30 ms/step"
    )
    assert (1, "/w/model.py", 17, "slow") in [(l.rank, l.file, l.line, l.role) for l in f.locations]


def test_long_compute_nobody_waits_for_is_not_a_straggler() -> None:
    rec = _record({0: _rank(0, 10.0, 5.0, [BWD]), 1: _rank(1, 40.0, 5.0, [BWD]), 2: _rank(2, 10.0, 5.0, [BWD])})
    assert detect(rec) == []


def test_add_keeps_a_named_straggler_and_adds_a_backward_one_otherwise() -> None:
    rec = _record({0: _rank(0, 10.0, 35.0, [BWD]), 1: _rank(1, 40.0, 5.0, [BWD])})
    named = [Finding("profile.straggler", "warning", "rank 0 ...")]
    assert add(named, rec) == named
    assert add([], rec) == []
    summary = [Finding("profile.summary", "note", "step ...")]
    assert [f.id for f in add(summary, rec)] == ["profile.straggler", "profile.summary"]
