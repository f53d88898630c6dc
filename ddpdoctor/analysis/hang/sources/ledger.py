"""The ledger's account of the ranks as the judge's facts: the rank states of analysis/state.py (the
collective ledger, the heartbeat, the sequence counters, the finish events). Pure."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ddpdoctor.analysis.hang.facts import ENDED, MISSING, RUNNING, WAITING, Call, RankFacts
from ddpdoctor.analysis.hang.facts import agreement_of as op_key
from ddpdoctor.analysis.state import P2P, RankState, ledger_entry_at
from ddpdoctor.record.reader import RankRecord

DDP_CALL = "<ddp all-reduce>"  # inside DDP's backward or forward: its all-reduce has no ledger position


def issued(s: RankState, group: str) -> int:
    """How many positions of ``group`` the rank issued: its count, or its pending call's position if later."""
    n = int((s.seq or {}).get(group, 0))
    p = s.pending or {}
    if str(p.get("group")) == group and p.get("seq") is not None:
        n = max(n, int(p["seq"]))
    return n


@dataclass(frozen=True)
class Look:
    """A look at a running job (the live monitor's): when, and how long a wait or a rank's counts must have
    held to be judged by (the settle time: a wait younger than that may be a call passing through)."""

    now: float
    settle: float

    def settled(self, s: RankState) -> bool:
        """A wait the look counts: in a collective (or at a sync point for one) for at least the settle time,
        seen by a heartbeat that is not stale."""
        return bool(s.proof_waiting and not s.stale and s.since and self.now - s.since >= self.settle)

    def steady(self, s: RankState) -> bool:
        """A rank outside any counted wait whose counts the look may judge by: a fresh heartbeat, and its
        positions unchanged for the settle time."""
        return not s.stale and s.seq_stable_for >= self.settle


def facts(states: Mapping[int, RankState], look: Look | None = None) -> dict[int, RankFacts]:
    """One fact per rank state (``fact``)."""
    return {r: fact(s, look) for r, s in states.items()}


def fact(s: RankState, look: Look | None = None, calls: dict[tuple, Call] | None = None) -> RankFacts:
    """A rank state's fact. A rank takes part in the groups it counts positions on (an ended rank counts what
    it issued); a rank waiting at a sync point for its asynchronous collective waits in that one; DDP's own
    all-reduce and a p2p op have no position or peer the ledger can compare, so their wait is unknown; a rank
    with no heartbeat yet is missing (what it did is unknown).

    ``look``: a running job's (the live monitor's). Only the waits it counts (``Look.settled``) are waits; any
    other (a call that may be passing through, DDP's all-reduce) reads as a rank running, steady where its
    counts held (``Look.steady``), and an unsettled wait is never steady. A waiting rank is seen at its last
    heartbeat, an ended one at its end.

    ``calls``: the calls built so far, by what they are (the ranks that wait in one call share it: the
    monitor builds the facts of 1,024 ranks every second, most of them in one collective)."""
    r, state = s.rank, s.state
    if state == "not-started":
        return RankFacts(r, MISSING)
    # the positions it issued (``issued``), written out: the monitor builds a fact of 1,024 ranks every second
    done = {g: int(n) for g, n in s.seq.items()} if s.seq else {}
    if s.ended:
        return RankFacts(r, ENDED, issued=done, seen=s.ended_t)
    p = s.pending
    if p:
        g, pos = p.get("group"), p.get("seq")
        g = str(g) if g is not None else None
        pos = int(pos) if pos is not None else None
        if g in done and pos is not None and done[g] < pos:
            done[g] = pos  # its pending call counts as issued
    if look is not None and state in ("waiting", "ddp-wait") and not look.settled(s):
        return RankFacts(r, RUNNING, issued=done, steady=state != "waiting" and look.steady(s))
    if state == "waiting":
        p = p or {}
        op, site = p.get("op"), p.get("site")
        at = (str(op), g, pos, tuple(site[:2]) if site else None, op_key(p), p.get("source") == "flight")
        try:
            call = calls[at] if calls is not None and at in calls else None
        except TypeError:  # a call that does not hash (odd shapes): built on its own
            calls = None
        if call is None:
            call = Call(at[0], g, pos, op in P2P, None, (at[3],) if at[3] else (), at[4], at[5])
            if calls is not None:
                calls[at] = call
        return RankFacts(r, WAITING, call, done, sending=bool(p.get("sends")), seen=s.hb_t)
    if state == "ddp-wait":
        return RankFacts(r, WAITING, Call(DDP_CALL, key=op_key({})), done)
    return RankFacts(r, RUNNING, issued=done, steady=look is None or look.steady(s))


def call_at(rec: RankRecord, c: Call) -> Call | None:
    """The Python call a rank's ledger holds at ``c``'s group and position; None where it holds none (a
    position its counter passed with no Python call: DDP's, or, under torch's recorder, any collective)."""
    if c.group is None or c.seq is None:
        return None
    e = ledger_entry_at(rec, c.group, c.seq)
    if e is None:
        # under torch's recorder the ledger holds none of the recorded calls: the call the rank's last heartbeat
        # says it is in (pending) or awaits (issued asynchronously, or DDP's bucket all-reduce in backward) at
        # that group and position is the one it issued there
        hb = rec.last_hb or {}
        e = next(
            (
                x
                for x in (hb.get("pending"), hb.get("awaiting"))
                if isinstance(x, dict) and x.get("group") == c.group and x.get("seq") == c.seq and x.get("op")
            ),
            None,
        )
    if e is None:
        return None
    site = tuple(e["site"][:2]) if e.get("site") else None
    return Call(str(e.get("op")), c.group, c.seq, sites=(site,) if site else (), key=op_key(e))


def made_before(rec: RankRecord, c: Call, before: int | None) -> bool:
    """Whether a rank's ledger holds a call at ``c``'s line (its innermost site's file and line) before position
    ``before`` of ``c``'s group (in another group, or with ``before`` None: at any position): the rank made
    that call before, so no rank test kept it out of the call (``judge.rank_test``'s ``reached``)."""
    first: Any = c.sites[0] if c.sites else None
    if not first:
        return False
    site = (str(first[0]), int(first[1]))
    for e in rec.ledger:
        if e.get("site") and (str(e["site"][0]), int(e["site"][1])) == site:
            rng = e.get("seq")
            if before is None or e.get("group") != c.group or not rng or int(rng[1]) < before:
                return True
    return False


class LazyFacts(Mapping[int, RankFacts]):
    """The facts of rank states, each built when first read: a rule that stops at the first rank that does
    not fit (every rank receiving, while rank 0 waits in an all-reduce) reads one rank of a thousand, as the
    live monitor asks every second."""

    def __init__(self, states: Mapping[int, RankState], look: Look | None = None) -> None:
        self._states, self._look = states, look
        self._built: dict[int, RankFacts] = {}
        self._calls: dict[tuple, Call] = {}

    def __getitem__(self, r: int) -> RankFacts:
        got = self._built.get(r)
        if got is None:
            got = self._built[r] = fact(self._states[r], self._look, self._calls)
        return got

    def __iter__(self) -> Iterator[int]:
        return iter(self._states)

    def __len__(self) -> int:
        return len(self._states)
