"""The ledger's account of the ranks as the judge's facts: the rank states of analysis/state.py (the
collective ledger, the heartbeat, the sequence counters, the finish events). Pure."""

from __future__ import annotations

from collections.abc import Mapping

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


def facts(states: Mapping[int, RankState]) -> dict[int, RankFacts]:
    """One fact per rank state. A rank takes part in the groups it counts positions on (an ended rank counts
    what it issued); a rank waiting at a sync point for its asynchronous collective waits in that one; DDP's
    own all-reduce and a p2p op have no position or peer the ledger can compare, so their wait is unknown."""
    out: dict[int, RankFacts] = {}
    for r, s in states.items():
        done = {g: issued(s, g) for g in (s.seq or {})}
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
            out[r] = RankFacts(r, WAITING, call, done)
        elif s.state == "ddp-wait":
            out[r] = RankFacts(r, WAITING, Call(DDP_CALL, key=op_key({})), done)
        elif s.ended:
            out[r] = RankFacts(r, ENDED, issued=done)
        else:
            out[r] = RankFacts(r, RUNNING, issued=done)
    return out
