"""The hang judge's core, shared by every kind of evidence: who waits for whom, which ranks are at the
ends of those chains, and whether every rank waits in one call. Pure: the stdlib and facts.py only.

It also holds the one copy of the walk to the first position where the ranks' calls part (``partings``),
of the rules that name the odd ranks where they differ (``rarest``, ``extra_callers``) and of the rule that
tells an extra call from the calls that follow it (``insertion``), whichever source the calls come from.

Every source (the ledger's rank states, the flight recorder's dumps, the stacks) is first read into the
same per-rank facts (facts.py, analysis/hang/sources/). From them ``waits_graph`` says, for every rank that
waits, which ranks it waits for: in a collective, the members that have not issued it (or left no record);
in a p2p op, its peer unless the peer waits in the matching op. A rank that waits for ranks that wait in turn is a victim of whatever stops the last of them.
The ranks at the ends of the chains wait for nobody: a rank behind (nothing pending, an empty record), one
without records, or one stuck inside an op every rank it needs has issued. Those are the first suspects;
with none (every chain is a cycle), the ranks diverged: an extra call or a mismatch, not a straggler.
"""

from __future__ import annotations

import bisect
import operator
from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from ddpdoctor.analysis.hang.facts import ABSENT, ENDED, MISSING, RUNNING, WAITING, Call, RankFacts, RankTest, Slot

T = TypeVar("T")
P = TypeVar("P", bound=Hashable)  # a position: a sequence id, (group, sequence id), ...


def waits_graph(
    facts: Mapping[int, RankFacts], members: Callable[[str], Collection[int]] | None = None
) -> tuple[dict[int, set[int]], set[int]]:
    """Who each waiting rank waits for. In a collective: the other members of its group whose last issued
    position is below the call's, and the members without records (``MISSING``). In a p2p op: its peer,
    unless the peer's oldest open p2p op on the group is the matching one (p2p positions count every peer of
    a group, so they are never compared across ranks). ``members`` names a group's ranks (the flight
    recorder's pg_config); by default they are the ranks that issued on it.

    Returns (waits, unknown): ``unknown`` holds the waiting ranks whose wait the facts cannot resolve (no
    group or position, a p2p op without its peer, a group with no other member known); they end no chain.
    A thousand ranks waiting in one collective ask the same question: each (group, position) is answered
    once."""
    waits: dict[int, set[int]] = {}
    unknown: set[int] = set()
    behind: dict[tuple[str, int], tuple[set[int], set[int]]] = {}
    for r, f in facts.items():
        if f.state != WAITING:
            continue
        c = f.pending
        if c is None or c.group is None:
            unknown.add(r)
        elif c.p2p:
            got = _p2p_waits(facts, r, c)
            if got is None:
                unknown.add(r)
            else:
                waits[r] = got
        elif c.seq is None:
            unknown.add(r)
        else:
            k = (c.group, c.seq)
            if k not in behind:
                mem = set(members(c.group)) if members else {q for q, t in facts.items() if c.group in t.issued}
                behind[k] = (mem, {q for q in mem if _behind(facts.get(q), c.group, c.seq)})
            mem, late = behind[k]
            if not mem - {r}:
                unknown.add(r)  # nobody else known to be in the group: who it waits for is unknown
            else:
                waits[r] = late - {r}
    return waits, unknown


def _behind(f: RankFacts | None, group: str, seq: int) -> bool:
    if f is None:
        return False  # outside the records' world: not known to be behind
    return f.state == MISSING or f.issued.get(group, 0) < seq


def _p2p_waits(facts: Mapping[int, RankFacts], r: int, c: Call) -> set[int] | None:
    if c.peer is None:
        return None
    kind, q = c.peer
    theirs = facts.get(q)
    if theirs is not None and theirs.state == MISSING:
        return {q}
    if theirs is None or q == r:
        return None
    match = theirs.open_p2p.get(str(c.group))
    want = ("recv" if kind == "send" else "send", r)
    return set() if match is not None and match.peer == want else {q}


def one_place(facts: Iterable[RankFacts]) -> bool:
    """Every one of these ranks waits, and all in the same call (its group and position; for the stacks,
    its op and line): not a divergence, but a call that does not complete (a slow peer, the network, the
    backend) or one whose arguments disagree, which the caller tells apart by its source's calls."""
    places = set()
    for f in facts:
        if f.state != WAITING or f.pending is None:
            return False
        places.add(f.pending.place())
    return len(places) == 1


def receive_cycle(facts: Mapping[int, RankFacts]) -> tuple[int, ...] | None:
    """Every rank waits to receive and none has a send of its own outstanding: no message can ever arrive.
    The ranks, or None where any rank runs, ended, left no record or waits in anything else. The one copy of
    the policy's receive-cycle rule: the ledger's post-mortem and the live monitor's proof ask it of their
    facts (the live ones count only the waits that lasted the settle time)."""
    if not facts:
        return None
    for f in facts.values():
        if f.state != WAITING or f.pending is None or not f.pending.receives or f.sending:
            return None
    return tuple(sorted(facts))


def rank_test(
    facts: Mapping[int, RankFacts],
    test_of: Callable[[int, Call], RankTest | None],
    reached: Callable[[int, Call], bool] | None = None,
) -> tuple[tuple[int, ...], RankTest] | None:
    """The ranks that wait in a collective they reached under a rank test (``if rank == 0:``) that the other
    ranks never reached: theirs is the call the others never make, so they are the culprits at its line. The
    ranks, and the test that led the first of them there; None where no rank test explains the waits (the
    rules after this one then name the rank that left).

    ``test_of(rank, call)``: the rank test on that rank's way to the call it waits in, None for none (the
    source reads its frames: ``paths.rank_test``). A test that leaves the rank itself out is not taken (the
    file changed since the job ran). ``reached(rank, call)``: whether that rank's records say it made that call
    (its line) before, or leave it open (a rank ended from outside may have got there); the test did not keep
    such a rank out of the call.

    The culprits are every rank waiting in the same call (its place, what must agree, its line) as the lowest
    rank a rank test led to its wait. They are named when the others are off that call, at least one of them
    known to be (ended, running, or waiting in another call: a rank without records proves nothing), no other
    rank waits under a rank test of its own (an if/else on the rank, each side waiting in its own call, or two
    ``if``s on the rank, one for each side: no side is named; a test whose branch holds the culprits' test, as
    ``if local_rank != -1:`` around a whole step, is every rank's, not theirs) and no other rank reached the
    call.

    The one body of the policy's rank-test rule: the ledger's post-mortem (analysis/hang/deadlock.py), the
    stacks ``attach`` took (attach.py) and torch's flight-recorder dumps (dumps.py) ask it of their facts."""
    waiting = {r: f.pending for r, f in sorted(facts.items()) if f.state == WAITING and f.pending and not f.pending.p2p}
    tests: dict[int, RankTest] = {}

    def tested(r: int, c: Call) -> RankTest | None:
        if r not in tests:
            t = test_of(r, c)
            if t is None or not t.admits(r):
                return None
            tests[r] = t
        return tests[r]

    first = next((r for r, c in waiting.items() if tested(r, c) is not None), None)
    if first is None:
        return None
    call = waiting[first]
    spot = _spot(call)
    culprits = tuple(r for r, c in waiting.items() if _spot(c) == spot)
    others = [q for q in facts if q not in culprits]
    if all(facts[q].state == MISSING for q in others):
        return None  # nobody is known to be off the call
    mine = tests[first]
    for q in others:
        c = waiting.get(q)
        theirs = tested(q, c) if c is not None else None
        if (theirs is not None and not theirs.holds(mine)) or (reached is not None and reached(q, call)):
            return None
    return culprits, mine


def _spot(c: Call) -> tuple:
    """Which call a rank waits in, for the ranks in one call: its place, what must agree and its line (ranks
    at one position may wait in different calls there)."""
    return (c.place(), c.key, c.sites[:1])


# How a peer proves that a wait can never complete (``Stranded.how``).
EXITED: Final = "exited"  # a member of the call's group ended without it
WAITS: Final = "waits"  # it waits in another call of the group, or at another position of it
ELSEWHERE: Final = "elsewhere"  # it waits on another group while no rank runs
ISSUED: Final = "issued"  # it went past the position with another call there


@dataclass(frozen=True)
class Stranded:
    """A wait that can never complete: the waiting rank, the first peer (in the facts' order) that proves it,
    how (``EXITED``, ``WAITS``, ``ELSEWHERE``, ``ISSUED``) and the peer's call there (``None`` for ``EXITED``,
    and for ``ISSUED`` where the peer's records hold no Python call at the position: DDP's own all-reduce)."""

    rank: int
    peer: int
    how: str
    call: Call | None = None


def stranded(
    facts: Mapping[int, RankFacts], issued_at: Callable[[int, Call], Call | None], margin: float = 0.0
) -> Stranded | None:
    """The first rank (in the facts' order) that waits in a collective no peer can ever match, with the first
    member of its group that proves it: one that ended (at least ``margin`` seconds before the waiting rank
    was last seen still waiting, or at a time unknown), one that waits in another call of the group or at
    another position of it, one that waits on another group while no rank runs, or one that went past the
    position with another call there (``issued_at(peer, call)``: the call the peer's records hold at that
    call's group and position; ``None``: no Python call, DDP's own all-reduce, unless the waiting call is one
    torch's recorder saw, which a ledger never holds). A p2p op is matched by its peer, never by position: it
    is no such wait. Peers whose look is not ``steady`` prove nothing.

    The one copy of the policy's exited and differ rules over the ranks' pending calls: the live monitor's
    proof asks it of its facts (the waits that lasted the settle time, seen by fresh heartbeats). Linear in
    the ranks: what a peer proves depends only on the call waited in (group, position, what must agree), so
    each distinct call scans the peers once, not each waiting rank (1,023 ranks waiting in one barrier while
    one rank waits elsewhere is the common case of a job across nodes); each group's ended members are read
    once."""
    order = list(facts)
    calm: list[bool] = []  # whether no rank runs, read once when first needed

    def none_runs() -> bool:
        if not calm:
            calm.append(all(facts[q].state != RUNNING for q in order))
        return calm[0]

    proofs: dict[Hashable, tuple[int, str, Call | None] | None] = {}
    ends: dict[str | None, tuple[list[float], list[int]]] = {}
    for r in order:
        f = facts[r]
        c = f.pending
        if f.state != WAITING or c is None or c.p2p or c.group is None:
            continue  # a p2p op, or a call of no known group: no member can prove anything against it
        k = (c.group, c.seq, c.key, c.recorder)
        try:
            if k not in proofs:
                proofs[k] = _peer_proof(facts, order, c, issued_at, none_runs)
            proof = proofs[k]
        except TypeError:  # a call that does not hash (odd shapes): no memo
            proof = _peer_proof(facts, order, c, issued_at, none_runs)
        gone = _first_ended(ends, facts, order, c.group, (f.seen or 0.0) - margin)
        if gone is not None and (proof is None or gone < proof[0]):
            return Stranded(r, order[gone], EXITED)
        if proof is not None:
            return Stranded(r, order[proof[0]], proof[1], proof[2])
    return None


def _peer_proof(
    facts: Mapping[int, RankFacts],
    order: Sequence[int],
    c: Call,
    issued_at: Callable[[int, Call], Call | None],
    none_runs: Callable[[], bool],
) -> tuple[int, str, Call | None] | None:
    """The first live member of ``c``'s group (its index in ``order``) that proves a wait in ``c`` can never
    complete, how, and its call; None if none does. A rank waiting in ``c`` itself proves nothing against
    ``c``, so the answer holds for every rank waiting in it. Ended members are ``_first_ended``'s."""
    g = c.group
    for i, q in enumerate(order):
        b = facts[q]
        if b.state in (ENDED, MISSING) or not b.steady or g not in b.issued:
            continue  # not (known to be) a member of that group, ended, or not seen long enough
        if b.state == WAITING:
            d = b.pending
            if d is None or d.p2p:
                continue
            if d.group != g:
                if none_runs():
                    return i, ELSEWHERE, d
                continue
            if d.seq != c.seq or d.key != c.key:
                return i, WAITS, d
            continue
        if c.seq is None or g is None or b.issued[g] < c.seq:
            continue  # behind: it may still issue the call
        e = issued_at(q, c)
        if e is None:
            if c.recorder:
                continue  # a call torch made here, seen by the recorder, against one the peer's ledger lacks
            return i, ISSUED, None
        if e.key != c.key:
            return i, ISSUED, e
    return None


def _first_ended(
    cache: dict[str | None, tuple[list[float], list[int]]],
    facts: Mapping[int, RankFacts],
    order: Sequence[int],
    group: str | None,
    before: float,
) -> int | None:
    """The index in ``order`` of the first member of ``group`` that ended at or before ``before``, or whose
    end time is unknown; None if none did."""
    if group not in cache:
        idx = [i for i, q in enumerate(order) if facts[q].state == ENDED and group in facts[q].issued]
        low, m = [], float("inf")
        for i in idx:  # the earliest end so far, negated: a non-decreasing list to bisect
            t = facts[order[i]].seen
            m = min(m, float("-inf") if t is None else t)
            low.append(-m)
        cache[group] = (low, idx)
    low, idx = cache[group]
    j = bisect.bisect_left(low, -before)
    return idx[j] if j < len(idx) else None


def pending_parting(facts: Mapping[int, RankFacts]) -> tuple[str, int, dict[int, Call]] | None:
    """The first position (group, sequence id) where two or more waiting ranks' pending calls sit and differ
    in what must agree (``Call.key``): those calls can never meet, whatever the ranks' histories say. The
    pending calls at it, by rank. None where no two pending calls share a position, or all that do agree.
    The evidence is the pending calls alone (a heartbeat's, a dump's): it holds where a rank's history is
    lost (its flight record never written) and only its position and pending call remain."""
    at: dict[tuple[str, int], dict[int, Call]] = {}
    for r in sorted(facts):
        c = facts[r].pending
        if facts[r].state != WAITING or c is None or c.p2p or c.group is None or c.seq is None:
            continue
        at.setdefault((c.group, c.seq), {})[r] = c
    for (g, q), calls in sorted(at.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if len(calls) > 1 and len({c.key for c in calls.values()}) > 1:
            return g, q, calls
    return None


def reached(waits: Mapping[int, Iterable[int]]) -> set[int]:
    """Every rank some waiting rank waits for, directly or through other waiting ranks."""
    seen: set[int] = set()
    todo = [p for u in waits.values() for p in u]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        todo.extend(waits.get(p, ()))
    return seen


def chain_ends(waits: Mapping[int, Iterable[int]], unknown: Iterable[int] = ()) -> list[int]:
    """The ranks waited for (directly or through a chain) that wait for nobody themselves. ``unknown``:
    ranks whose wait the evidence cannot resolve (a group whose members nobody recorded); they end no
    chain, since they may well wait for someone."""
    blind = set(unknown)
    return sorted(p for p in reached(waits) if not list(waits.get(p, ())) and p not in blind)


def rarest(keys: Mapping[int, Hashable]) -> tuple[int, ...]:
    """The ranks whose key (what they wait in, or the signature of their call at one position) is the
    rarest among the ranks', when it is rarer than another: those are the odd ones out. () when every key is
    as common as every other (two ranks that disagree, or one key shared by all): the evidence names no side.

    The one copy of this rule for every source: the flight recorder's pending calls (analysis/hang/dumps.py),
    the stacks of an attached job (attach.py) and the ledger's mismatched position (divergence.py)."""
    counts = Counter(keys.values())
    if len(counts) < 2:
        return ()
    least = min(counts.values())
    if least == max(counts.values()):
        return ()
    return tuple(sorted(r for r, k in keys.items() if counts[k] == least))


def extra_callers(
    stacks: Mapping[int, Sequence[Hashable]], history: Mapping[int, Collection[Hashable]]
) -> dict[int, Hashable]:
    """The ranks that made an extra call, each with the site that is its own: a site of its current stack
    (innermost first) that no other rank's history holds, while every other rank's innermost site is one this
    rank's history holds too (a shifted sequence: the others are one call behind at a line it used). A
    symmetric if/else, where each rank has a line of its own, names nobody; nor does a result that names
    every rank.

    Every site of the stack counts, not the innermost only: an extra call made through a helper shares the
    helper's line with the regular calls, and the line unique to the extra rank is its caller's. The ledger
    and the stacks give one site per rank, the flight recorder every user frame of the pending entry."""
    ranks = sorted(stacks)
    found: dict[int, Hashable] = {}
    for r in ranks:
        others = [o for o in ranks if o != r]
        own = [s for s in stacks[r] if all(s not in history[o] for o in others)]
        if own and all(stacks[o] and stacks[o][0] in history[r] for o in others):
            found[r] = own[0]
    return found if len(found) < len(ranks) else {}


def insertion(extra: Sequence[T], other: Sequence[T], same: Callable[[T, T], bool] = operator.eq) -> int | None:
    """Whether ``extra``'s first call is one call more than ``other``'s: how many of ``extra``'s calls after
    its first agree (``same``), in order, with ``other``'s from its first. A count > 0 when every call they
    both hold agrees (an insertion: the others' calls, shifted by one), 0 when nothing overlaps, None when
    they contradict it. The ledger's attribution (analysis/hang/attribution.py) and the flight recorder's
    extra call that completed against another rank's next one (analysis/hang/dumps.py) ask it of their calls."""
    a, b = extra[1:], other
    n = min(len(a), len(b))
    if n == 0:
        return 0
    return n if all(same(x, y) for x, y in zip(a[:n], b[:n])) else None


_ROUTINE_SPAN = 6


def repeats(calls: Sequence[Hashable], period: int) -> bool:
    """Whether ``calls`` end in a routine of ``period``: their last ``max(period, 6)`` calls are each the
    call one period before. A short run of equal calls (two all-reduces in a row) is no routine, nor is a
    step seen only twice when it holds fewer than 6 calls. The one reading of a routine, for the ranks'
    common calls (``routine``) and for each rank's own (``programs.own_departure``)."""
    span = max(period, _ROUTINE_SPAN)
    n = len(calls)
    return n - span - period >= 0 and all(calls[n - 1 - k] == calls[n - 1 - k - period] for k in range(span))


def routine(calls: Mapping[int, Sequence[Hashable]]) -> tuple[int, tuple[int, ...], Hashable] | None:
    """Training repeats itself: each rank's calls, index by index (a token per call: what must agree and the
    line), read for the first index where the ranks' tokens differ; the smallest period of the calls before
    it that repeats at least twice whole gives the token each rank's own earlier steps had there. Returns
    (that index, the ranks whose token is not it, the token), or None where the calls before do not repeat
    or every rank (or none) left it. The ledger's attribution and the flight recorder's dumps ask it where
    the ranks part with calls of the same kind from different lines (a rank that skips a block's forward
    under FSDP meets the others' forward all-gather with its backward one)."""
    if len(calls) < 2:
        return None
    n = min(len(c) for c in calls.values())
    first = next((i for i in range(n) if len({c[i] for c in calls.values()}) > 1), None)
    if first is None:
        return None
    ref = calls[min(calls)]  # before ``first`` every rank's calls are the same
    # the smallest period that the calls before repeat over
    before = ref[:first]
    period = next((p for p in range(1, first // 2 + 1) if repeats(before, p)), None)
    if period is None:
        return None
    expected = ref[first - period]
    left = tuple(sorted(r for r, c in calls.items() if c[first] != expected))
    if not left or len(left) == len(calls):
        return None
    return first, left, expected


@dataclass(frozen=True)
class Parting(Generic[P]):
    """A position where the ranks' calls part: what each rank holds there, the ranks that left the common
    path (``odd``; every rank where the evidence names no side) and how they part. ``kind`` is ``exited`` (a
    rank that ended never issued it), ``op-mismatch``, ``shape-mismatch`` or ``extra-call`` (the same op from a
    line that is one rank's own). ``exclusive``: the odd ranks' line here is one no other rank ever reaches."""

    pos: P
    slots: dict[int, Slot]
    odd: tuple[int, ...]
    kind: str
    exclusive: bool = False


def partings(
    ranks: Sequence[int],
    positions: Iterable[P],
    slot_at: Callable[[int, P], Slot],
    *,
    ended: Collection[int] = (),
    sites_of: Mapping[int, Collection[Hashable]] | None = None,
    partial: bool = False,
) -> Iterator[Parting[P]]:
    """The positions, in the order given, where the ranks' calls part: the one walk over a sequence of calls,
    whichever source gave it (the ledger's positions of a group, the dumps' completed positions, the one
    position the stacks show). ``slot_at`` gives a rank's ``Slot`` at a position (op ``ABSENT`` for none).

    At each position:
    - a rank with nothing there that ``ended`` parts there (``exited``);
    - a rank with nothing there that lives is behind: the position is passed over, unless ``partial``, where
      the ranks that hold it are compared (completed calls, which every member joined: a rank without one
      lost its record of it, it was not behind). The walk stops where no rank holds anything (``partial``:
      passes it over);
    - p2p ops are passed over: a send pairs with a recv, matched by peers, never by position;
    - different keys (``Slot.key``) part: the odd ranks are the rarest key's, else (two sides) the ranks
      whose line there no other rank ever reaches (``sites_of``: each rank's lines), else every rank;
    - one key from different lines parts where one rank's line is its own alone and the others' line is one
      it used too (``extra_callers``, a shifted sequence); a symmetric if/else names nobody and does not part.
      Needs ``sites_of``; without it, lines are not compared."""
    gone = set(ended)
    for pos in positions:
        slots = {r: slot_at(r, pos) for r in ranks}
        absent = [r for r, sl in slots.items() if sl.op == ABSENT]
        if absent:
            if len(absent) == len(slots):
                if partial:
                    continue  # sparse positions (completed calls): a later one may still be held
                return  # past every rank's calls
            left = [r for r in absent if r in gone]
            if left:
                yield Parting(pos, slots, tuple(left), "exited")
                continue
            if not partial:
                continue
            slots = {r: sl for r, sl in slots.items() if sl.op != ABSENT}
            if len(slots) < 2:
                continue
        if any(sl.p2p for sl in slots.values()):
            continue
        keys = {r: sl.key() for r, sl in slots.items()}
        if len(set(keys.values())) > 1:
            odd = _odd_ones(slots, sites_of or {}, keys)
            kind = "shape-mismatch" if len({sl.op for sl in slots.values()}) == 1 else "op-mismatch"
            yield Parting(pos, slots, odd, kind, _exclusive(odd, slots, sites_of or {}))
            continue
        if sites_of is None or len({sl.site for sl in slots.values()}) < 2:
            continue
        extra = extra_callers({r: [sl.site] if sl.site else [] for r, sl in slots.items()}, sites_of)
        if extra:
            yield Parting(pos, slots, tuple(sorted(extra)), "extra-call", True)


def _own_line(r: int, slots: Mapping[int, Slot], sites_of: Mapping[int, Collection[Hashable]]) -> bool:
    """Rank ``r``'s line at this position is one no other rank ever reaches."""
    site = slots[r].site
    return bool(site) and all(site not in sites_of.get(o, ()) for o in slots if o != r)


def _exclusive(odd: tuple[int, ...], slots: Mapping[int, Slot], sites_of: Mapping[int, Collection[Hashable]]) -> bool:
    if not odd or len(odd) == len(slots):
        return False
    return all(_own_line(r, slots, sites_of) for r in odd)


def _odd_ones(
    slots: Mapping[int, Slot], sites_of: Mapping[int, Collection[Hashable]], keys: Mapping[int, Hashable]
) -> tuple[int, ...]:
    odd = rarest(keys)
    if odd:
        return odd
    # two sides (or no rarest call): the ranks whose line here no other rank ever reaches
    own = [r for r in slots if _own_line(r, slots, sites_of)]
    if own and len(own) < len(slots):
        return tuple(sorted(own))
    return tuple(sorted(slots))
