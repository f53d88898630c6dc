"""Which rank's call is the extra one, when the ranks met each other with different collectives. Pure.

At 2 ranks (or whenever no majority issued the same call) the first divergence alone cannot say whose
call is out of place: rank 0's ``all_reduce`` under ``if rank == 0:`` meets rank 1's ``barrier`` that
follows it, and both lines are ones the other rank never reached. Two kinds of evidence separate them:

- *alignment*: each rank's calls from the divergence on (ledger entries, the internal DDP collectives
  between them, the pending or awaited asynchronous call). A rank that made one extra call issues, after
  it, what the others issued at the divergence: its sequence aligns with theirs as an insertion on that
  rank. A rank whose next calls contradict that is not the inserter.
- *rank tests*: the call (or the call into the helper that made it, or a caller on the rank's stack) sits
  under an ``if`` that tests the rank (``if rank == 0:``, ``if accelerator.is_main_process:``) and the
  other ranks' call does not.
- *routine*: training repeats itself. Where the ranks' calls (op, shapes and line) were the same for at
  least two whole periods before they parted, the call each rank's own earlier steps made at that point is
  the expected one; the ranks that left it are the culprits. This is how a rank that skips a layer of an
  FSDP model is found: its all-gathers look like the others' but come from another line (backward's
  instead of forward's), and every rank ends up waiting inside the same kind of collective.

A group of ranks (same op, shapes and line at the divergence) is named the culprit when the evidence
points at it and at no other group; otherwise the ranks stay *suspects*.
"""

from __future__ import annotations

import dataclasses
import linecache
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.analysis.findings import Finding, Location, ranks_phrase
from ddpdoctor.analysis.hang import judge, paths
from ddpdoctor.analysis.hang.divergence import ABSENT, INTERNAL, Divergence, Slot, sequence
from ddpdoctor.analysis.hang.facts import WAITING, Call, RankFacts, RankTest
from ddpdoctor.analysis.hang.sources.ledger import made_before
from ddpdoctor.analysis.state import RankState
from ddpdoctor.record.reader import RunRecord

_MAX_TAIL = 16  # calls after the divergence compared per rank: an insertion shows in the first few


@dataclass(frozen=True)
class Attribution:
    """The ranks whose call at the divergence is the extra one, and why."""

    culprits: tuple[int, ...]
    how: str  # "insertion" | "rank test" | "insertion, rank test"
    guard: tuple[str, int] | None = None  # the rank test that led there (file, line)
    entry: tuple[str, int] | None = None  # the call into the helper, under that test (file, line)
    aligned: int = 0  # calls after the extra one that align with the others'
    evidence: dict[str, Any] = field(default_factory=dict)
    # routine: (position, the slot the earlier steps had there) where the culprits left their routine
    routine: tuple[int, Slot] | None = None


def tails(record: RunRecord, states: dict[int, RankState], div: Divergence) -> dict[int, list[Slot]]:
    """Each rank's slots of the divergence's group from its position on: ledger entries, internal
    collectives between them, and the pending (or awaited) call last."""
    out: dict[int, list[Slot]] = {}
    for r in div.slots:
        ledger = record.ranks[r].ledger
        at = div.position(r)
        final = max(
            [int((states[r].seq or {}).get(div.group, 0))]
            + [int(e["seq"][1]) for e in ledger[-8:] if e.get("group") == div.group and e.get("seq")]
        )
        p = states[r].pending
        if p and p.get("group") == div.group and p.get("seq"):
            final = max(final, int(p["seq"]))
        final = min(final, at + _MAX_TAIL - 1)
        seq = sequence(record, r, div.group, final, at) if final >= at else {}
        if p and p.get("group") == div.group and p.get("seq") and at <= int(p["seq"]) <= final:
            had = seq.get(int(p["seq"]))
            if had is None or had.op in (INTERNAL, ABSENT) or p.get("source") != "flight":
                # the recorder's pending call has the main thread's line now (an async call's wait): the
                # ledger's entry at its position, with the call's own line, is the better record
                seq[int(p["seq"])] = Slot(
                    p.get("op", "?"),
                    tuple(p["site"]) if p.get("site") else None,
                    p.get("shapes"),
                    dtypes=p.get("dtypes"),
                )
        # at least the divergence's own slot: a rank that waits in another group has issued nothing here. p2p
        # ops are left out, as the walk leaves them out (they shift positions on gloo)
        rest = (seq.get(s, Slot(ABSENT)) for s in range(at + 1, final + 1))
        out[r] = [div.slots[r]] + [sl for sl in rest if not sl.p2p]
    return out


def _signature(tail: list[Slot]) -> tuple:
    return tuple((s.key(), None if s.op == INTERNAL else s.site) for s in tail)


def _same(a: Slot, b: Slot) -> bool:
    return a.key() == b.key() and (a.op == INTERNAL or a.site == b.site)


def _inserted(extra: list[Slot], other: list[Slot]) -> int | None:
    """``judge.insertion`` of the ranks' calls from the divergence on (positions a rank has not reached left
    out): a count > 0 when ``extra``'s first call is an insertion, 0 when nothing overlaps, None when they
    contradict it."""
    return judge.insertion(
        extra[:1] + [s for s in extra[1:] if s.op != ABSENT], [s for s in other if s.op != ABSENT], _same
    )


def attribute(record: RunRecord, states: dict[int, RankState], div: Divergence) -> Attribution | None:
    """The ranks whose call at ``div`` is the extra one, or None when the evidence cannot separate the
    ranks (then every rank that met a different call is only a suspect)."""
    if div.kind not in ("op-mismatch", "shape-mismatch", "extra-call") or len(div.slots) < 2:
        return None
    classes: dict[tuple, list[int]] = {}
    for r, sl in sorted(div.slots.items()):
        classes.setdefault((sl.key(), sl.site), []).append(r)
    if len(classes) < 2:
        return None
    tail = tails(record, states, div)
    world = record.world_size or len(states)
    calls = {r: _call(div, sl) for r, sl in div.slots.items()}

    def test_of(r: int, c: Call) -> RankTest | None:
        return paths.rank_test_of(record, r, c.sites[0], world) if c.sites else None

    def reached(q: int, c: Call) -> bool:
        return made_before(record.ranks[q], c, div.position(q))

    # the rank test names the group whose call alone a rank test led to (judge.rank_test, the rule the ledger
    # asks where a rank ended without the call), where no other rank made that call before: a rank that did
    # was not kept out of it by the test, and its own call here may be the one after a loop it left early
    got = judge.rank_test({r: RankFacts(r, WAITING, c) for r, c in calls.items()}, test_of, reached)
    tested = set(got[0]) if got is not None else set()
    # ranks with the same calls from the divergence on are compared once (linear at any world size)
    sig = {r: _signature(t) for r, t in tail.items()}
    scored = []
    for k, rs in classes.items():
        members = set(rs)
        others = [r for r in div.slots if r not in members]
        mine = {sig[r]: r for r in rs}
        theirs = {sig[o]: o for o in others}
        ins = [_inserted(tail[r], tail[o]) for r in mine.values() for o in theirs.values()]
        if any(x is None for x in ins):
            continue  # its later calls contradict an insertion: not the extra one
        aligned = min(x for x in ins if x is not None) if ins else 0
        own_guard = members == tested
        if aligned or own_guard:
            scored.append((bool(aligned) + bool(own_guard), aligned, k, rs, own_guard))
    if scored:
        scored.sort(key=lambda x: (-x[0], -x[1]))
    if not scored or (len(scored) > 1 and scored[0][:2] == scored[1][:2]):
        return routine(record, div)  # else two groups explained equally well: suspects
    _s, aligned, k, rs, own_guard = scored[0]
    if len(rs) >= len(div.slots):
        return None
    how = ", ".join(w for w, on in (("insertion", aligned), ("rank test", own_guard)) if on)
    # named as the way there even where the other ranks' code has the same test
    t = got[1] if own_guard and got is not None else test_of(rs[0], calls[rs[0]])
    t = t if t is not None and t.admits(rs[0]) else None
    g = (t.file, t.test) if t else None
    # the frame under the test where it is not the call's own line: a caller, or the call into the helper
    site = div.slots[rs[0]].site
    entry = (t.file, t.line) if t and site and (t.file, t.line) != (str(site[0]), int(site[1])) else None
    ev = {
        "culprits": list(rs),
        "how": how,
        "aligned_after": aligned,
        "guard": list(g) if g else None,
        "entry": list(entry) if entry else None,
    }
    return Attribution(tuple(rs), how, g, entry, aligned, ev)


def _call(div: Divergence, sl: Slot) -> Call:
    """A rank's slot at the divergence as the call it holds there (its line and what must agree: the ranks
    holding one call are the ranks of one group here). DDP's internal call and a position never issued have
    no line of the user's, so no rank test leads to them."""
    site = sl.site if sl.op not in (INTERNAL, ABSENT) else None
    return Call(sl.op, div.group, div.seq, sl.p2p, sites=(site,) if site else (), key=sl.key())


_LOOK = 512  # positions looked back for a routine: two periods of a step of up to 256 collectives


def _token(sl: Slot) -> tuple:
    return (sl.op,) if sl.op in (INTERNAL, ABSENT) else (sl.key(), sl.site)


def routine(record: RunRecord, div: Divergence) -> Attribution | None:
    """The ranks that left their own routine first (see the module's docstring; ``judge.routine``), or None
    where the calls before the parting do not repeat, or every rank left it."""
    if div.at or len(div.slots) < 2:
        return None  # positions shifted by p2p: no common numbering to compare periods in
    lo = max(1, div.seq - _LOOK)
    seqs = {r: sequence(record, r, div.group, div.seq, lo) for r in div.slots}
    tokens = {r: [_token(q[s]) for s in range(lo, div.seq + 1)] for r, q in seqs.items()}
    got = judge.routine(tokens)
    if got is None:
        return None
    first, left, _token_there = got
    pos = lo + first
    expected = seqs[next(r for r in seqs if r not in left)][pos]
    if expected.op in (INTERNAL, ABSENT):
        return None
    ev = {"culprits": list(left), "how": "routine", "position": pos}
    if expected.site:
        ev["expected_site"] = list(expected.site)
    return Attribution(left, "routine", evidence=ev, routine=(pos, expected))


def explain(f: Finding, att: Attribution) -> Finding:
    """The rank-conditional finding with the rank test that led the culprits to their call (and the call
    into the helper, where the collective sits in one) among its locations and in its message."""
    if att.guard is None and not att.aligned and att.routine is None:
        return f
    locs = list(f.locations)
    parts = []
    if att.routine is not None:
        pos, sl = att.routine
        where = f" at {_short((str(sl.site[0]), int(sl.site[1])))}" if sl.site else ""
        fn = f" in {sl.site[2]}" if sl.site and len(sl.site) > 2 and not str(sl.site[2]).startswith("<") else ""
        parts.append(f"at #{pos} every earlier step, and the other ranks, made {sl.op}{where}{fn}; they did not")
        if sl.site:
            locs += [
                Location(
                    r, str(sl.site[0]), int(sl.site[1]), str(sl.site[2]) if len(sl.site) > 2 else "", "skipped here"
                )
                for r in att.culprits
            ]
    if att.guard is not None:
        locs += [Location(r, att.guard[0], att.guard[1], "", "rank test that led here") for r in att.culprits]
        parts.append(f"reached under the rank test at {_short(att.guard)}{_code(att.guard)}")
    if att.entry is not None:
        locs += [Location(r, att.entry[0], att.entry[1], "", "call that led here") for r in att.culprits]
        parts.append(f"through the call at {_short(att.entry)}")
    if att.aligned:
        nxt = "call is the one" if att.aligned == 1 else f"{att.aligned} calls are the ones"
        parts.append(f"its next {nxt} the others made there (one call more than theirs)")
    who = ranks_phrase(att.culprits) if len(att.culprits) <= 8 else "they"  # the list is in the message already
    did = "left the routine the others kept" if att.how == "routine" else "made the extra call"
    msg = f"{f.message}; {who} {did}: {', '.join(parts)}"
    return Finding(
        f.id, f.severity, msg, f.hint, f.ranks, tuple(locs), dict(f.evidence, attribution=att.evidence), f.culprits
    )


def as_suspects(f: Finding) -> Finding:
    """A divergence whose evidence cannot tell which rank's call is out of place: its ranks are suspects,
    not culprits, and the finding says so."""
    suspects = tuple(f.culprits)
    if not suspects:
        return f
    head, sep, _tail = f.message.partition("; diverged: ")
    rest = _tail.partition(";")[2] if sep else ""
    msg = (
        f"{head}; suspects: {ranks_phrase(suspects)} (neither the calls that followed nor a rank test "
        f"tells which rank's call is the extra one){';' + rest if rest else ''}"
    )
    locs = tuple(dataclasses.replace(l, role="suspect") if l.role == "diverged" else l for l in f.locations)
    return Finding(f.id, f.severity, msg, f.hint, f.ranks, locs, dict(f.evidence, suspects=list(suspects)), ())


def _short(at: tuple[str, int]) -> str:
    return f"{at[0].rsplit('/', 1)[-1]}:{at[1]}"


def _code(at: tuple[str, int]) -> str:
    text = linecache.getline(at[0], at[1]).strip()
    if " #" in text:
        text = text[: text.index(" #")].rstrip()
    return f" (`{text[:60]}`)" if text else ""
