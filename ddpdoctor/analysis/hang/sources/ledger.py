"""The ledger's account of the ranks as the judge's facts: the rank states of analysis/state.py (the
collective ledger, the heartbeat, the sequence counters, the finish events). Pure."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from ddpdoctor.analysis.hang.facts import ENDED, RUNNING, WAITING, Call, RankFacts
from ddpdoctor.analysis.hang.facts import agreement_of as op_key
from ddpdoctor.analysis.state import P2P, RankState

DDP_CALL = "<ddp all-reduce>"  # inside DDP's backward or forward: its all-reduce has no ledger position


def issued(s: RankState, group: str) -> int:
    """How many positions of ``group`` the rank issued: its count, or its pending call's position if later."""
    n = int((s.seq or {}).get(group, 0))
    p = s.pending or {}
    if str(p.get("group")) == group and p.get("seq") is not None:
        n = max(n, int(p["seq"]))
    return n


def facts(states: Mapping[int, RankState], settled: Callable[[RankState], bool] | None = None) -> dict[int, RankFacts]:
    """One fact per rank state (``fact``)."""
    return {r: fact(s, settled) for r, s in states.items()}


def fact(s: RankState, settled: Callable[[RankState], bool] | None = None) -> RankFacts:
    """A rank state's fact. A rank takes part in the groups it counts positions on (an ended rank counts what
    it issued); a rank waiting at a sync point for its asynchronous collective waits in that one; DDP's own
    all-reduce and a p2p op have no position or peer the ledger can compare, so their wait is unknown.
    ``settled``: which waits count as waits (the live monitor's: those that lasted its settle time, seen by a
    fresh heartbeat); any other wait reads as a rank running, a call that may be passing through."""
    r = s.rank
    done = {g: issued(s, g) for g in (s.seq or {})}
    if s.state == "waiting" and settled is not None and not settled(s):
        return RankFacts(r, RUNNING, issued=done)
    if s.state == "waiting":
        p = s.pending or {}
        g, pos = p.get("group"), p.get("seq")
        site = tuple(p["site"][:2]) if p.get("site") else None
        call = Call(
            str(p.get("op")),
            str(g) if g is not None else None,
            int(pos) if pos is not None else None,
            p2p=p.get("op") in P2P,
            sites=(site,) if site else (),
            key=op_key(p),
        )
        return RankFacts(r, WAITING, call, done, sending=bool(p.get("sends")))
    if s.state == "ddp-wait":
        return RankFacts(r, WAITING, Call(DDP_CALL, key=op_key({})), done)
    if s.ended:
        return RankFacts(r, ENDED, issued=done)
    return RankFacts(r, RUNNING, issued=done)


class LazyFacts(Mapping[int, RankFacts]):
    """The facts of rank states, each built when first read: a rule that stops at the first rank that does
    not fit (every rank receiving, while rank 0 waits in an all-reduce) reads one rank of a thousand, as the
    live monitor asks every second."""

    def __init__(self, states: Mapping[int, RankState], settled: Callable[[RankState], bool] | None = None) -> None:
        self._states, self._settled = states, settled
        self._built: dict[int, RankFacts] = {}

    def __getitem__(self, r: int) -> RankFacts:
        got = self._built.get(r)
        if got is None:
            got = self._built[r] = fact(self._states[r], self._settled)
        return got

    def __iter__(self) -> Iterator[int]:
        return iter(self._states)

    def __len__(self) -> int:
        return len(self._states)
