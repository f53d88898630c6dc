"""Align the ranks' collective sequences and find the first point where they part. Pure.

Each rank's sequence for a process group is rebuilt from its ledger (Python-level collectives, with
their call sites) and its sequence counter (which also counts the collectives DDP issues from C++):
a position the counter passed but no ledger entry covers is an *internal* collective (DDP's bucket
all-reduce or buffer broadcast).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.analysis.hang import judge
from ddpdoctor.analysis.hang.facts import ABSENT, AWAY, INTERNAL, Slot
from ddpdoctor.analysis.state import RankState
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

__all__ = ["ABSENT", "AWAY", "INTERNAL", "Divergence", "Slot", "first_divergence", "sequence"]


@dataclass(frozen=True)
class Divergence:
    """The first position of a group where the ranks' sequences differ, and the ranks that left there."""

    group: str
    seq: int
    slots: dict[int, Slot]
    diverged: tuple[int, ...]  # ranks that left the common path here
    kind: str  # extra-call | op-mismatch | shape-mismatch | exited
    exclusive: bool = False  # the diverged ranks' line here is one no other rank ever reaches
    # each rank's own position of its slot, where it is not ``seq`` (gloo counts a p2p op in the group's
    # sequence on the ranks that take part only: pipeline stages' positions run ahead of the others')
    at: dict[int, int] = field(default_factory=dict)

    def position(self, rank: int) -> int:
        """Rank ``rank``'s own position of its slot here."""
        return self.at.get(rank, self.seq)


def sequence(record: RunRecord, rank: int, group: str, final_seq: int, lo: int = 1) -> dict[int, Slot]:
    """Rank ``rank``'s slots of ``group`` from position ``lo`` (the first one every rank's ledger still
    covers) to ``final_seq``."""
    out: dict[int, Slot] = {}
    for e in reversed(record.ranks[rank].ledger):  # newest first: stop at the window's start
        rng = e.get("seq")
        if not rng or e.get("group") != group:
            continue
        if rng[1] < lo:
            break
        slot = (
            # DDP's reducer's call, recorded by torch (record/flight.py): what the wrappers' ledger leaves as
            # internal, so that both records read alike
            Slot(INTERNAL)
            if e.get("by") == "autograd"
            else Slot(
                e.get("op", "?"), tuple(e["site"]) if e.get("site") else None, e.get("shapes"), dtypes=e.get("dtypes")
            )
        )
        for s in range(max(rng[0], lo), rng[1] + 1):
            out[s] = slot
    for s in range(lo, final_seq + 1):
        out.setdefault(s, Slot(INTERNAL))
    return out


def unrecorded(record: RunRecord, rank: int) -> bool:
    """The rank handed its collectives to torch's flight recorder (``DDPDOCTOR_COLLECTIVES=recorder``: its
    init event lists the ``recorded`` ops) and no flight record of it was read (killed before a dump: a gloo
    abort, a signal). Its ledger then holds none of its collectives: a position its counter passed is not
    DDP's internal call but unknown, and no divergence can be read from it."""
    rec = record.ranks[rank]
    init = rec.event(schema.K_INIT)
    return bool(init and init.get("recorded")) and rec.flight is None


def window_start(record: RunRecord, ranks: list[int], group: str) -> int:
    """The first position of ``group`` that every rank's ledger still covers: 1 unless a ring dropped
    older collectives, then the latest of the trimmed ledgers' first positions (a position before it may
    be a rotated-away Python collective on one rank and look like an internal one)."""
    lo = 1
    for r in ranks:
        rec = record.ranks[r]
        if not rec.ledger_trimmed:
            continue
        first = next((e["seq"][0] for e in rec.ledger if e.get("group") == group and e.get("seq")), None)
        if first is not None:
            lo = max(lo, int(first))
    return lo


def main_group(record: RunRecord, states: dict[int, RankState]) -> str | None:
    """The process group most ranks report sequence numbers for (the default group), or None."""
    counts: Counter = Counter()
    for st in states.values():
        for g in st.seq or {}:
            counts[g] += 1
    return counts.most_common(1)[0][0] if counts else None


def first_divergence(record: RunRecord, states: dict[int, RankState], group: str | None = None) -> Divergence | None:
    """The first position of ``group`` (the main one) where the ranks' collectives differ, or None."""
    group = group or main_group(record, states)
    if group is None:
        return None
    ranks = [r for r, st in states.items() if st.seq and group in st.seq]
    if len(ranks) < 2 or any(unrecorded(record, r) for r in ranks):
        return None
    # the heartbeat's counter may be older than the ledger (a fast rank that aborted between beats)
    final = {
        r: max(
            [int((states[r].seq or {})[group])]
            + [int(e["seq"][1]) for e in record.ranks[r].ledger[-8:] if e.get("group") == group and e.get("seq")]
        )
        for r in ranks
    }
    # a pending collective counts as issued; a rank still computing has not issued further ones
    lo = window_start(record, ranks, group)
    cache: dict[tuple, list] = {}
    entries = {r: _entries(record.ranks[r].ledger, group, lo, cache) for r in ranks}
    # every position before `start` holds the same collective on every rank: nothing to find there
    start = max(lo, min(_first_difference(entries, ranks), min(final.values()) + 1))
    seqs = {r: sequence(record, r, group, final[r], start) for r in ranks}
    memo: dict[int, tuple] = {}
    by_list: dict[tuple, set] = {}  # ranks read as one share their entries: their sites once
    sites_of = {}
    for r in ranks:
        es = entries[r]
        k = (id(es[0]), id(es[-1]), len(es)) if es else ()
        if k not in by_list:
            by_list[k] = {_site(e["site"], memo) for e in es if e.get("site")}
        sites_of[r] = set(by_list[k])
    for r in ranks:
        p = states[r].pending
        if p and p.get("group") == group and p.get("seq"):
            if p.get("source") == "flight":
                # a call torch made (DDP's bucket, FSDP's), seen by the recorder: the ledger's entry there where the
                # rank's flight record has it, else as unknown as the other ranks' unrecorded positions
                continue
            seqs[r][int(p["seq"])] = Slot(
                p.get("op", "?"), tuple(p["site"]) if p.get("site") else None, p.get("shapes"), dtypes=p.get("dtypes")
            )
            if p.get("site"):
                sites_of[r].add(tuple(p["site"]))
    # The walk's positions are each rank's calls in order with its p2p ops left out, as NCCL counts them: gloo
    # counts a p2p op in the group's sequence on the ranks that take part only, so after a send from stage 0
    # to stage 1 their positions run one ahead of the other stages'. Everything before `start` agrees, so the
    # k-th call from `start` is the same call on every rank; a position a rank's records leave open within
    # its own range stays open (ABSENT), as before.
    order = {
        r: [s for s in range(start, max(seqs[r], default=start - 1) + 1) if not (s in seqs[r] and seqs[r][s].p2p)]
        for r in ranks
    }
    absent = Slot(ABSENT)

    def slot_at(r: int, i: int) -> Slot:
        o = order[r]
        return seqs[r].get(o[i], absent) if i < len(o) else absent

    ended = [r for r in ranks if states[r].ended]
    n = max(len(o) for o in order.values())
    part = next(judge.partings(ranks, range(n), slot_at, ended=ended, sites_of=sites_of), None)
    if part is None:
        return None
    at = {r: order[r][part.pos] for r in ranks if part.pos < len(order[r])}
    # the position named is the diverged rank's own (the first that holds a call there)
    named = next((at[r] for r in (*part.odd, *ranks) if r in at), start)
    return Divergence(
        group,
        named,
        part.slots,
        part.odd,
        part.kind,
        part.exclusive,
        {r: s for r, s in at.items() if s != named},
    )


def abort_divergence(record: RunRecord, states: dict[int, RankState], aborted: list[int]) -> Divergence | None:
    """gloo aborted a rank whose collectives were left to torch's recorder before any record of it was read
    (``unrecorded``): its positions are unknown, but faulthandler's stack shows the call it was in. Where that
    call's line is one no other rank's record ever reached, while every other rank's record is there, the
    aborted rank made a call the others never made: it diverged at the position the abort reached (the others'
    call there, DDP's bucket all-reduce in a training loop, is what gloo matched it with). None otherwise."""
    group = main_group(record, states)
    if group is None:
        return None
    found = []
    for r in aborted:
        err = record.ranks[r].error or {}
        frame, op = err.get("user_frame"), err.get("op")
        if unrecorded(record, r) and frame and op and (states.get(r) and (states[r].seq or {}).get(group)):
            found.append((r, tuple(frame), str(op)))
    others = [o for o in states if o not in {f[0] for f in found}]
    if len(found) != 1 or not others or any(not record.ranks[o].ledger or unrecorded(record, o) for o in others):
        return None
    r, site, op = found[0]
    history = {tuple(e["site"]) for o in others for e in record.ranks[o].ledger if e.get("site")}
    if site in history:
        return None
    seq = int((states[r].seq or {})[group])
    slots = {r: Slot(op, site, None)}
    for o in others:
        at = next(
            (
                e
                for e in reversed(record.ranks[o].ledger)
                if e.get("group") == group and (e.get("seq") or [0])[0] == seq
            ),
            None,
        )
        slots[o] = (
            Slot(
                at.get("op", "?"),
                tuple(at["site"]) if at.get("site") else None,
                at.get("shapes"),
                dtypes=at.get("dtypes"),
            )
            if at and at.get("src") != "flight"
            else Slot(INTERNAL)
        )
    return Divergence(group, seq, slots, (r,), "extra-call", exclusive=True)


def cross_group_divergence(record: RunRecord, states: dict[int, RankState]) -> Divergence | None:
    """Ranks that wait in collectives of different groups: a cross-group deadlock, where rank 1 all-reduces on a
    side group (``if rank == 1: dist.all_reduce(x, group=side)``) that rank 0 never calls, while rank 0 waits
    in the default group for rank 1. Each group's own sequence shows only a rank that is behind; the odd call
    is the one whose line is the rank's own alone while the other ranks wait at a line it used too
    (``judge.extra_callers``, the rule the flight recorder's and the stacks' judgements use). Returns that
    call's group and position, the other ranks ``AWAY`` (at their own pending line), or None."""
    pend = {
        r: st.pending
        for r, st in states.items()
        if st.state == "waiting" and st.pending and st.pending.get("group") is not None and st.pending.get("seq")
    }
    if len(pend) < 2 or len(pend) < len(states) or len({str(p["group"]) for p in pend.values()}) < 2:
        return None
    stacks: dict[int, list[tuple]] = {}
    history: dict[int, set[tuple]] = {}
    for r, p in pend.items():
        site = tuple(p["site"]) if p.get("site") else None
        stacks[r] = [site] if site else []
        history[r] = {tuple(e["site"]) for e in record.ranks[r].ledger if e.get("site")} | set(stacks[r])
    extra = judge.extra_callers(stacks, history)
    groups = {str(pend[r]["group"]) for r in extra}
    if not extra or len(groups) != 1:
        return None
    group = groups.pop()
    seq = min(int(pend[r]["seq"]) for r in extra)
    slots = {
        r: Slot(p.get("op", "?"), tuple(p["site"]) if p.get("site") else None, p.get("shapes"), dtypes=p.get("dtypes"))
        if r in extra
        else Slot(AWAY, tuple(p["site"]) if p.get("site") else None)
        for r, p in pend.items()
    }
    return Divergence(group, seq, slots, tuple(sorted(extra)), "extra-call", True)


def _entries(ledger: list[dict[str, Any]], group: str, lo: int, cache: dict[tuple, list]) -> list[dict[str, Any]]:
    """The ledger entries of ``group`` from position ``lo``; ranks whose ledgers were read as one (the same
    entry objects) get the same list, computed once."""
    if not ledger:
        return []
    key = (id(ledger[0]), id(ledger[-1]), len(ledger))  # the cache lives as long as the ledgers
    got = cache.get(key)
    if got is None:
        got = cache[key] = [e for e in ledger if e.get("group") == group and e.get("seq") and e["seq"][1] >= lo]
    return got


def _site(site: Any, memo: dict[int, tuple]) -> tuple:
    t = memo.get(id(site))
    if t is None:
        t = memo[id(site)] = tuple(site)
    return t


def _first_difference(entries: dict[int, list[dict[str, Any]]], ranks: list[int]) -> int:
    """The first position where some rank's ledger may differ from the first rank's: its ledger entries
    are compared in order (ranks whose ledgers were read as one share the entries themselves). Positions
    between equal entries are the same DDP-internal ones on both. Linear in ranks x entries."""
    ref = entries[ranks[0]]
    start = None
    for r in ranks[1:]:
        other = entries[r]
        i, n = 0, min(len(ref), len(other))
        while i < n:
            a, b = ref[i], other[i]
            if a is not b and (
                a["seq"] != b["seq"]
                or a.get("op") != b.get("op")
                or a.get("site") != b.get("site")
                or a.get("shapes") != b.get("shapes")
                or a.get("dtypes") != b.get("dtypes")
            ):
                break
            i += 1
        if i < len(ref) or i < len(other):
            here = min(e["seq"][0] for e in (ref[i : i + 1] + other[i : i + 1]))
        else:
            here = (ref[-1]["seq"][1] + 1) if ref else 1
        if i and here > ref[i - 1]["seq"][1] + 1:
            here = ref[i - 1]["seq"][1] + 1  # the gap after the last equal entry may differ (internal or not)
        start = here if start is None else min(start, here)
    return 1 if start is None else start
