"""Each rank's calls in program order, across every process group: where one rank made a call the others did
not, or skipped one they made. Pure.

Every group's own sequence can agree while the job deadlocks: in a 2-D device mesh (dp x tp), global rank 3
all-reduces once more on its tp group, and its tp peer meets that extra call with the next step's one; each
group then only shows a rank behind, and every rank waits for another (a cycle), on a different group. The
order in which a rank makes its calls, whatever group each goes to, still shows it: the ranks run the same
program, so at each index they make the same call (op and line) on their own group of the same kind. The
first index where one rank's call differs from the others' is where it left the common path, and how its
calls after it align with theirs says which way (``judge.insertion``, the rule the per-group walk uses):

- its calls from the next index on are the others' from this one: it made one call more (an extra call);
- its calls from this index on are the others' from the next one: it made one call fewer (a skipped call).

The odd rank is the rarest call's (``judge.rarest``): two ranks that disagree name no side. The judgement
needs each rank's whole order (no ledger rotated away) and its lines.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ddpdoctor.analysis.findings import Finding, Location, group_values
from ddpdoctor.analysis.hang import judge
from ddpdoctor.analysis.hang.divergence import Divergence, main_group, unrecorded
from ddpdoctor.analysis.hang.facts import UNRECORDED, Slot
from ddpdoctor.analysis.hang.hints import hint_for
from ddpdoctor.analysis.hang.waits import best_where, state_text
from ddpdoctor.analysis.ids import HANG_RANK_CONDITIONAL_COLLECTIVE
from ddpdoctor.analysis.state import RankState
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord
from ddpdoctor.record.schema import P2P


@dataclass(frozen=True)
class Step:
    """One call of a rank's program: the group it went to and its position there, its line where the source
    has one, and what another rank makes at the same index of the same program (``agree``): the ledger's op
    and line; a dump's op, sizes, dtypes and the group's mesh dimension (never its frames: a JSON dump has
    none, and the culprit must not depend on the format)."""

    op: str
    site: tuple[Any, ...] | None
    group: str
    seq: int
    agree: Hashable = None

    def key(self) -> Hashable:
        """What another rank makes at the same index of the same program."""
        return self.agree if self.agree is not None else (self.op, self.site)


@dataclass(frozen=True)
class ProgramParting:
    """Where one rank's program left the others': the index, the odd ranks, ``extra`` (one call more) or
    ``skipped`` (one call fewer), the odd ranks' step there (the extra call, or the call they made instead of
    the skipped one) and the others' step there (the call the odd ranks skipped, in the others' groups)."""

    index: int
    odd: tuple[int, ...]
    kind: str
    steps: dict[int, Step | None]
    expected: Step

    def skipped_at(self, programs: Mapping[int, Sequence[Step]], rank: int) -> tuple[str, int] | None:
        """The group and position the skipped call would have had on ``rank``: its own group for that op
        and line, one past the position it had reached there."""
        own = programs[rank]
        later = next((s for s in own[self.index :] if s.key() == self.expected.key()), None)
        return (later.group, later.seq) if later else None


def ledger_programs(record: RunRecord, ranks: Sequence[int], states: Mapping[int, RankState]) -> dict[int, list[Step]]:
    """Each rank's collectives in the order it issued them, every group's (p2p ops left out: a send and its
    recv sit at different lines), its pending call last where the ledger has not written it yet."""
    out: dict[int, list[Step]] = {}
    for r in ranks:
        seen: set[tuple[str, int]] = set()
        steps: list[Step] = []
        entries = list(record.ranks[r].ledger)
        pending = states[r].pending
        if pending:
            entries.append(pending)
        for e in entries:
            step = _step(e)
            if step is None or (step.group, step.seq) in seen:
                continue
            seen.add((step.group, step.seq))
            steps.append(step)
        out[r] = steps
    return out


def _step(e: Mapping[str, Any]) -> Step | None:
    seq = e.get("seq")
    if e.get("group") is None or not seq or not e.get("site") or e.get("op") in P2P:
        return None
    last = seq[1] if isinstance(seq, (list, tuple)) else seq
    return Step(str(e.get("op", "?")), tuple(e["site"]), str(e["group"]), int(last))


def program_parting(progs: Mapping[int, Sequence[Step]]) -> ProgramParting | None:
    """The first index where one rank's program left the others', when its later calls prove one call more
    or one fewer; None when the orders agree or nothing names a side (fewer than three ranks, two sides).
    Each program must be whole from the job's start (no ledger or ring rotated away)."""
    ranks = sorted(progs)
    if len(ranks) < 3:
        return None
    n = max((len(p) for p in progs.values()), default=0)
    for i in range(n):
        keys = {r: (p[i].key() if i < len(p) else None) for r, p in progs.items()}
        if len(set(keys.values())) < 2:
            continue
        odd = judge.rarest(keys)
        if not odd or any(keys[r] is None for r in odd):
            return None  # a rank whose calls ended here: an exit, judged elsewhere
        rest = [r for r in ranks if r not in odd]
        ref = progs[max(rest, key=lambda r: len(progs[r]))]
        if i >= len(ref):
            return None
        kinds = {_which_way(progs[r][i:], ref[i:]) for r in odd}
        if len(kinds) != 1 or None in kinds:
            return None
        kind = kinds.pop()
        return ProgramParting(i, odd, str(kind), {r: progs[r][i] for r in odd}, ref[i])
    return None


def _which_way(own: Sequence[Step], others: Sequence[Step]) -> str | None:
    """``extra`` when ``own`` is ``others`` with one call inserted first, ``skipped`` when it is ``others``
    without their first call; None when neither (or both: nothing after it tells them apart)."""

    def same(a: Step, b: Step) -> bool:
        return a.key() == b.key()

    extra = judge.insertion(own, others, same)
    skipped = judge.insertion(others, own, same)
    if extra and not skipped:
        return "extra"
    if skipped and not extra:
        return "skipped"
    return None


def group_label(group: str, members: Sequence[int] = (), desc: str | None = None) -> str:
    """A group as the report names it: its mesh dimension where a DeviceMesh made it (torch's group
    description ``mesh_<dim>``), else its name and members: ``group tp (4: ranks 2,3)``, ``group 4 (ranks 2,3)``."""
    who = f"ranks {','.join(map(str, sorted(members)))}" if members else ""
    if desc and desc.startswith("mesh_") and desc != "mesh_default":
        return f"group {desc[len('mesh_') :]} ({group}{': ' + who if who else ''})"
    return f"group {group}" + (f" ({who})" if who else "")


def members_of(progs: Mapping[int, Sequence[Step]], group: str) -> list[int]:
    """The ranks whose calls went to ``group``."""
    return sorted(r for r, p in progs.items() if any(s.group == group for s in p))


@dataclass(frozen=True)
class Told:
    """A program parting in the report's words: what each odd rank did (``said``), where (``locations``, its
    line where the source has one) and the group and position the finding's evidence names."""

    said: tuple[str, ...]
    locations: tuple[Location, ...]
    group: str | None
    seq: int | None
    label: str


def tell(part: ProgramParting, progs: Mapping[int, Sequence[Step]], descs: Mapping[str, str]) -> Told:
    """The odd ranks' extra or skipped call, its group named by its mesh dimension where ``descs`` say it."""
    said: list[str] = []
    locs: list[Location] = []
    group: str | None = None
    seq: int | None = None
    label = "its group"
    for r in part.odd:
        step = part.steps[r]
        if part.kind == "extra" and step is not None:
            group, seq = step.group, step.seq
            label = group_label(group, members_of(progs, group), descs.get(group))
            if step.site:
                locs.append(_loc(r, step.site, "extra call"))
            said.append(f"rank {r} made one {step.op} more{_on(step.site)}, on {label} #{seq}")
        else:
            exp = part.expected
            where = part.skipped_at(progs, r)
            group, seq = where if where else (None, None)
            if group is not None:
                label = group_label(group, members_of(progs, group), descs.get(group))
            if exp.site:
                locs.append(_loc(r, exp.site, "skipped this call"))
            said.append(
                f"rank {r} skipped its {exp.op}{_on(exp.site)} on {label}"
                + (f" (#{seq}: its next one there met the others' #{seq} one call early)" if seq else "")
            )
    return Told(tuple(said), tuple(locs), group, seq, label)


def program_finding(
    record: RunRecord, states: Mapping[int, RankState], ev: dict[str, Any], descs: Mapping[str, str] | None = None
) -> Finding | None:
    """``hang.rank-conditional-collective`` from the ranks' program orders in the ledger (``program_parting``):
    the rank that made one call more or one fewer, the group and line where it did, and the ranks stranded on
    the other groups as its victims. None when the orders name nobody."""
    ranks = sorted(states)
    if any(record.ranks[r].ledger_trimmed for r in ranks):
        return None
    progs = ledger_programs(record, ranks, states)
    part = program_parting(progs)
    if part is None:
        return None
    told = tell(part, progs, descs or {})
    victims = [r for r in ranks if r not in part.odd]
    locs = list(told.locations) + [l for r in victims if (l := best_where(record, states[r], "victim"))]
    stranded = group_values({r: state_text(states[r]) for r in victims})
    return finding(
        part, told, stranded, tuple(ranks), tuple(locs), ev, hint_for(record, HANG_RANK_CONDITIONAL_COLLECTIVE)
    )


def finding(
    part: ProgramParting,
    told: Told,
    stranded: str,
    ranks: tuple[int, ...],
    locs: tuple[Location, ...],
    ev: dict[str, Any],
    hint: str,
) -> Finding:
    """The one finding a program parting makes, whichever source gave the programs."""
    culprits = tuple(sorted(part.odd))
    msg = f"a collective is called on some ranks only: {'; '.join(told.said)}; stranded: {stranded}"
    how = {"group": told.group, "seq": told.seq, "diverged": list(culprits), "how": f"program order: {part.kind} call"}
    return Finding(
        HANG_RANK_CONDITIONAL_COLLECTIVE,
        "error",
        msg,
        hint,
        ranks,
        locs,
        dict(ev, divergence=how, group_label=told.label),
        culprits=culprits,
    )


def _loc(rank: int, site: tuple[Any, ...], role: str) -> Location:
    return Location(rank, str(site[0]), int(site[1]), str(site[2]) if len(site) > 2 else "", role)


def _on(site: tuple[Any, ...] | None) -> str:
    return f" at {str(site[0]).rsplit('/', 1)[-1]}:{site[1]}" if site else ""


class OwnReading(NamedTuple):
    """A rank's calls read against its own earlier steps (``own_departure``): ``kind`` is ``ok``, ``skipped``
    (``call``: the routine's call it left out) or ``extra`` (``call``: the call its routine does not make
    there); ``at``: the index, in the calls read, of the extra call, or of the first call made after the
    left-out one (None for ``ok``)."""

    kind: str
    call: Hashable = None
    at: int | None = None


def own_departure(calls: Sequence[Hashable]) -> OwnReading | None:
    """A rank's calls read against its own earlier steps: the smallest period its calls repeat over (twice
    whole, before what it has made of the step it is in), then ``ok`` where the calls since are the start of
    that period, ``skipped`` where they are the period with one call left out and a later call of it already
    made (the left-out call is proven, not just not yet made), ``extra`` where they are the period with one
    call put in and a call of the period already made after it (proven the same way: a call that only stands
    where the period's next one should is no more an extra call than a call made in its place); None where no
    period repeats, or the readings disagree."""
    n = len(calls)
    for p in range(1, n // 3 + 1):
        said: dict[tuple[str, Hashable], int | None] = {}  # (kind, call): the first index it is read at
        for k in range(p):  # how many calls of the step it is in it has made
            body = calls[: n - k]
            if not judge.repeats(body, p):
                continue
            period = body[len(body) - p :]
            tail = list(calls[n - k :])
            if tail == list(period[:k]):
                said[("ok", None)] = None
                continue
            for j in range(k):  # a call left out before the last one made: the later one proves it
                rest = list(period[:j]) + list(period[j + 1 :])
                if tail == rest[:k]:
                    said.setdefault(("skipped", period[j]), n - k + j)
            for j in range(k - 1):  # a call put in before the last one made: the later one proves it
                if tail[:j] == list(period[:j]) and tail[j + 1 :] == list(period[j : k - 1]):
                    said.setdefault(("extra", tail[j]), n - k + j)
        if ("ok", None) in said:
            return OwnReading("ok")
        if said:
            if len(said) > 1:
                return None
            ((kind, call), at) = said.popitem()
            return OwnReading(kind, call, at)
    return None


def off_routine(calls: Mapping[int, Sequence[Hashable] | None]) -> tuple[int, OwnReading] | None:
    """The one rank off its own routine: each rank's calls (``None``: the source could not give them) read
    against its own earlier steps (``own_departure``); exactly one rank's step left out a call or made one
    more, and every other rank is where its own routine has it. The rank and its reading, or None where a
    rank has no routine to read it against, or no rank or several ranks left theirs. The one body of the
    policy's own-routine rule, whichever source gave the calls: the ledger's (op, line) of each call, p2p ops
    included, or a gloo dump's entries with a hole for each p2p op its op ids count."""
    read: dict[int, OwnReading] = {}
    for r, own in calls.items():
        got = own_departure(own) if own else None
        if got is None:
            return None  # a rank without a routine: nothing to read it against
        read[r] = got
    odd = [r for r, got in read.items() if got.kind != "ok"]
    return (odd[0], read[odd[0]]) if len(odd) == 1 else None


def abort_off_routine(record: RunRecord, states: Mapping[int, RankState], aborted: Sequence[int]) -> Divergence | None:
    """gloo aborted one rank on a size mismatch while every other rank's calls are unknown (they were left to
    torch's recorder, and torchrun ended those ranks before any record of them was written: ``unrecorded``), so
    nothing compares across ranks. The aborted rank's own calls on the main group, (op, line) each, are read
    against its own routine: where its first call that never completed is not the one its routine makes
    there (the call one period before: ``judge.repeats``, the one reading of a routine), and the call it made
    next is, it made one call more, and gloo matched that call with a peer's call of another size. None
    otherwise (no routine before it, or nothing made after it: an extra call unproven)."""
    group = main_group(record, dict(states))
    others = [o for o in states if o not in aborted]
    if group is None or len(aborted) != 1 or not others or not all(unrecorded(record, o) for o in others):
        return None
    r = aborted[0]
    entries = sorted(
        (e for e in record.ranks[r].ledger if e.get("group") == group and e.get("seq")), key=lambda e: e["seq"][0]
    )
    i = next((k for k, e in enumerate(entries) if e.get("st") != schema.ST_DONE), None)
    if i is None or i + 1 >= len(entries) or any(not e.get("site") for e in entries[: i + 2]):
        return None
    calls = [(str(e.get("op")), tuple(e["site"])) for e in entries[: i + 2]]
    before = calls[:i]
    period = next((p for p in range(1, len(before) // 3 + 1) if judge.repeats(before, p)), None)
    if period is None:
        return None
    routine_next = before[len(before) - period]
    if calls[i] == routine_next or calls[i + 1] != routine_next:
        return None
    extra = entries[i]
    slots = {r: Slot(str(extra.get("op")), tuple(extra["site"]), extra.get("shapes"), dtypes=extra.get("dtypes"))}
    slots.update({o: Slot(UNRECORDED) for o in others})
    # exclusive: the policy's own-line rule names it (a call its own routine does not make is the extra one)
    return Divergence(group, int(extra["seq"][0]), slots, (r,), "extra-call", exclusive=True)


def own_routine_finding(record: RunRecord, states: Mapping[int, RankState], ev: dict[str, Any]) -> Finding | None:
    """``hang.rank-conditional-collective`` where the ranks run different programs by role (pipeline stages:
    one sends, one receives and sends on, one receives), so no index compares across ranks and the
    cross-rank order (``program_parting``) names nobody: each rank read against its own earlier steps
    (``own_departure``, p2p ops included). Asked where a rank waits in a p2p op (its peer went on without the
    matching call); the one rank whose step left out a call its earlier steps made is the culprit, at that
    call's line, and every other rank must be where its own routine has it."""
    ranks = sorted(states)
    if len(ranks) < 2 or any(record.ranks[r].ledger_trimmed for r in ranks):
        return None
    if not any((states[r].pending or {}).get("op") in P2P for r in ranks):
        return None
    got = off_routine({r: _own_calls(record, states[r]) for r in ranks})
    if got is None or got[1].kind != "skipped":
        return None  # an extra call is the first divergence's, read by the rules before
    r, reading = got
    call = reading.call
    assert isinstance(call, tuple)  # an (op, site) of _own_calls
    op, site = str(call[0]), tuple(call[1])
    victims = [v for v in ranks if v != r]
    locs = [_loc(r, site, "skipped this call")] + [l for v in victims if (l := best_where(record, states[v], "victim"))]
    stranded = group_values({v: state_text(states[v]) for v in victims})
    msg = (
        f"a call is left out on one rank: rank {r} skipped its {op}{_on(site)}, which each of its own earlier "
        f"steps made there (its peers' calls differ by role, so it is read against its own routine); "
        f"stranded: {stranded}"
    )
    how = {"diverged": [r], "how": "own routine: skipped call", "op": op}
    return Finding(
        HANG_RANK_CONDITIONAL_COLLECTIVE,
        "error",
        msg,
        hint_for(record, HANG_RANK_CONDITIONAL_COLLECTIVE),
        tuple(ranks),
        tuple(locs),
        dict(ev, divergence=how),
        culprits=(r,),
    )


def _own_calls(record: RunRecord, state: RankState) -> list[tuple[str, tuple[Any, ...]]]:
    """A rank's calls in the order it issued them, p2p ops included: (op, site) each, its pending call last
    where the ledger has not written it yet; a call without a line ends the list (nothing to read after)."""
    seen: set[tuple[str, int]] = set()
    out: list[tuple[str, tuple[Any, ...]]] = []
    entries = list(record.ranks[state.rank].ledger)
    if state.pending:
        entries.append(state.pending)
    for e in entries:
        seq = e.get("seq")
        if e.get("group") is None or not seq:
            continue
        at = (str(e["group"]), int(seq[1] if isinstance(seq, (list, tuple)) else seq))
        if at in seen:
            continue
        seen.add(at)
        if not e.get("site"):
            return []
        out.append((str(e.get("op", "?")), tuple(e["site"])))
    return out
