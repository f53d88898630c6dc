"""Deadlocks and divergent collectives: the post-mortem diagnosis. Pure.

The live verdict (certain deadlock, timeout) is in :mod:`ddpdoctor.analysis.live`; this module explains a
run that ended: the first divergence of the ranks' collective sequences and what it means. The hints are
in :mod:`ddpdoctor.analysis.hang.hints`, the hangs without a divergence (receive cycles, timeouts) and the
words for where a rank stands in :mod:`ddpdoctor.analysis.hang.waits`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, Location, group_values, ranks_phrase
from ddpdoctor.analysis.hang import judge, paths, policy
from ddpdoctor.analysis.hang.attribution import as_suspects, attribute, explain
from ddpdoctor.analysis.hang.damage import monitor_lost
from ddpdoctor.analysis.hang.divergence import (
    ABSENT,
    INTERNAL,
    Divergence,
    Slot,
    abort_divergence,
    cross_group_divergence,
    first_divergence,
    sequence,
)
from ddpdoctor.analysis.hang.exits import ways_out
from ddpdoctor.analysis.hang.facts import ENDED, WAITING, Call, RankFacts, RankTest
from ddpdoctor.analysis.hang.hints import (
    BLOCKED_HINT,
    FRAMEWORK_HINTS,
    HINTS,
    P2P_HINT,
    frameworks,
    hint_for,
    uneven_hint,
)
from ddpdoctor.analysis.hang.paths import Departure, departed, loop_exits, rank_guard
from ddpdoctor.analysis.hang.programs import abort_off_routine, own_routine_finding, program_finding
from ddpdoctor.analysis.hang.sources.ledger import call_at, made_before
from ddpdoctor.analysis.hang.sources.ledger import facts as ledger_facts
from ddpdoctor.analysis.hang.waits import (
    at,
    best_where,
    code,
    receive_cycle,
    slot_loc,
    slot_text,
    state_text,
    timeout_finding,
)
from ddpdoctor.analysis.ids import (
    HANG_DIVERGENT_COLLECTIVE,
    HANG_EARLY_EXIT,
    HANG_RANK_CONDITIONAL_COLLECTIVE,
    HANG_SHAPE_MISMATCH,
    HANG_UNEVEN_BATCHES,
)
from ddpdoctor.analysis.state import SIZE_MISMATCH, RankState, all_states, is_transport_error
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

__all__ = ["BLOCKED_HINT", "FRAMEWORK_HINTS", "HINTS", "P2P_HINT", "best_where", "detect", "frameworks", "hint_for"]


def _uneven(record: RunRecord, states: dict[int, RankState]) -> tuple[dict[int, int], dict[int, Any]] | None:
    fwd = {r: s.ddp_fwd for r, s in states.items()}
    if len(set(fwd.values())) < 2 or min(fwd.values()) == 0:
        return None
    lens: dict[int, Any] = {}
    for r, rec in record.ranks.items():
        dl = [e for e in rec.events if e.get("kind") == schema.K_DATALOADER]
        if dl:
            lens[r] = dl[-1].get("len")
    if len(set(lens.values())) < 2 and any(states[r].state == "busy" for r, n in fwd.items() if n < max(fwd.values())):
        # a rank with fewer steps that is still busy (in its step, in a data-reading helper) has not run
        # out of batches unless its DataLoader is shorter: it has not come back; a wait for it is a
        # timeout, never uneven batches
        return None
    return fwd, lens


def _uneven_finding(
    record: RunRecord, states: dict[int, RankState], fwd: dict[int, int], lens: dict[int, Any], ev: dict
) -> Finding:
    more = [r for r, n in fwd.items() if n == max(fwd.values())]
    fewer = [r for r in fwd if r not in more]
    locs = [l for r in more if (l := best_where(record, states[r], "waiting (extra step)"))]
    locs += [l for r in fewer if (l := best_where(record, states[r], "ran out of batches"))]
    batch = f"; DataLoader lengths {group_values(lens)}" if lens else ""
    msg = (
        f"uneven number of DDP steps: {ranks_phrase(more)} ran {max(fwd.values())} forward passes, "
        f"{ranks_phrase(fewer)} ran {min(fwd.values())}{batch}"
    )
    return Finding(
        HANG_UNEVEN_BATCHES,
        "error",
        msg,
        uneven_hint(record),
        tuple(sorted(fwd)),
        tuple(locs),
        dict(ev, ddp_forwards=fwd, dataloader_len=lens),
        culprits=tuple(sorted(fewer)),
    )


def detect(record: RunRecord, cfg: Config) -> list[Finding]:
    """The hang of a run that ended, explained by the one policy (policy.py) over the ledger's evidence: the
    first divergence and what it means, else a wait."""
    case = LedgerCase.read(record, cfg)
    return policy.judge(case) if case is not None else []


class LedgerCase(policy.Case):
    """The ledger's evidence as the policy's case: the rank states at the verdict, the first divergence of the
    ranks' sequences, the DDP steps and DataLoader lengths, and the ledger's answers to the policy's questions.
    ``cut``: no verdict, no transport error and the monitor's record whole: the run ended on its own, or
    torchrun cut it short, and only ``finished_early`` is asked (what the record proves)."""

    source = "ledger"

    def __init__(self, record: RunRecord, cfg: Config, states: dict[int, RankState], now: float) -> None:
        self.record, self.cfg, self.now = record, cfg, now
        self.verdict = record.monitor_event(schema.K_VERDICT)
        self.states = states
        self.facts = ledger_facts(states)
        self.cut = False
        self.div: Divergence | None = None
        self.steps: tuple[dict[int, int], dict[int, Any]] | None = None
        self.ev: dict[str, Any] = {}
        self.size_err: list[int] = []
        can = {policy.POSITIONS, policy.HISTORY, policy.LINES, policy.STEPS, policy.ENDINGS}
        if self.verdict is not None:
            can.add(policy.STOPPED)
        self.can = frozenset(can)

    @classmethod
    def read(cls, record: RunRecord, cfg: Config) -> LedgerCase | None:
        """The case of a run's ledger; None where a rank raised an exception of its own (crash.detect explains
        it, the waits are its victims)."""
        verdict = record.monitor_event(schema.K_VERDICT)
        errors = {r: rec.error for r, rec in record.ranks.items() if rec.error}
        if any(not is_transport_error(e) for e in errors.values()):
            return None
        now = float(verdict["t"]) if verdict else record.latest_t()
        case = cls(record, cfg, all_states(record, now, cfg), now)
        if verdict is None and not errors and monitor_lost(record) is None:
            # no live verdict: the run ended on its own, or torchrun cut it short (with monitor.jsonl lost, the
            # ranks' pending collectives are all there is, and they are judged as a hang's would be)
            case.cut = True
            return case
        size_err = [r for r, e in errors.items() if SIZE_MISMATCH.search(str(e.get("message", "")))]
        case.states, reached = _reached_by_abort(record, case.states, size_err)
        case.size_err = size_err
        case.facts = ledger_facts(case.states)
        case.div = (
            first_divergence(record, case.states)
            or cross_group_divergence(record, case.states)
            or abort_divergence(record, case.states, size_err)
            or abort_off_routine(record, case.states, size_err)
        )
        case.steps = _uneven(record, case.states)
        ev: dict[str, Any] = {
            "reason": verdict.get("reason") if verdict else None,
            "live": verdict.get("mode") if verdict else None,
        }
        if size_err:
            ev["aborted"] = {r: str(errors[r].get("message", ""))[:200] for r in size_err}
        if reached:
            ev["reached_by_abort"] = reached
        case.ev = ev
        return case

    @property
    def lens_differ(self) -> bool:
        """The ranks' DataLoaders have different lengths."""
        u = self.steps
        return bool(u and u[1] and len(set(u[1].values())) > 1)

    def _uneven_finding(self) -> Finding:
        assert self.steps is not None
        return _uneven_finding(self.record, self.states, *self.steps, self.ev)

    def _rc(self, div: Divergence) -> Finding:
        return _from_div(
            self.record,
            HANG_RANK_CONDITIONAL_COLLECTIVE,
            div,
            self.states,
            self.ev,
            "a collective is called on some ranks only",
        )

    def rank_test(self) -> Finding | None:
        # asked where the first divergence is a rank that ended without the call the others wait in (where
        # every rank waits, the alignment after the divergence reads the rank test among its evidence)
        div = self.div
        if self.cut or div is None or div.kind != "exited":
            return None
        got = judge.rank_test(self._waits_at(div), self._test_of, self._reached)
        if got is None:
            return None
        # the ranks still waiting made a call under `if rank == ...`: theirs is the extra collective
        return self._rc(dataclasses.replace(div, diverged=got[0], kind="extra-call", exclusive=True))

    def _waits_at(self, div: Divergence) -> dict[int, RankFacts]:
        """The facts of the divergence's ranks, a rank the verdict ended while it waited (its record says no
        pending call any more: torchrun SIGTERMed it, its peer's transport error) waiting in the call its
        ledger holds at the divergence, the call that never completed."""
        out: dict[int, RankFacts] = {}
        for r in div.slots:
            if r not in self.facts:
                continue
            f = self.facts[r]
            if f.pending is None and f.state == ENDED and r not in div.diverged:
                c = call_at(self.record.ranks[r], Call("?", div.group, div.position(r)))
                if c is not None and c.sites:
                    f = dataclasses.replace(f, state=WAITING, pending=c)
            out[r] = f
        return out

    def _test_of(self, r: int, c: Call) -> RankTest | None:
        """The rank test on rank ``r``'s way to its call (``paths.rank_test_of``, as the extra-call rule reads
        it): around the call's line or a caller on its stack, or around a call into the helper that made it."""
        if not c.sites:
            return None
        return paths.rank_test_of(self.record, r, c.sites[0], self.record.world_size or len(self.states))

    def _reached(self, r: int, c: Call) -> bool:
        """Whether rank ``r``'s ledger holds a call at ``c``'s line before ``c``'s position (``made_before``),
        or leaves it open: a rank that ended on an error, or from outside before it recorded its finish, may
        have got there."""
        rec = self.record.ranks[r]
        if self.facts[r].state == ENDED and (rec.event(schema.K_FINISH) is None or rec.error):
            return True
        return made_before(rec, c, c.seq)

    def left_early(self) -> Finding | None:
        div = self.div
        if self.cut or div is None or div.kind == "exited":
            return None
        left = _departed(self.record, div)
        if left is None:
            return None
        if self.lens_differ:
            return self._uneven_finding()
        return _early_exit(self.record, div, self.states, self.ev, *left)

    def out_of_batches(self) -> Finding | None:
        div = self.div
        if div is not None and self.lens_differ and any(sl.op == INTERNAL for sl in div.slots.values()):
            # a rank out of batches met the others' DDP all-reduce with its end-of-epoch collective
            return self._uneven_finding()
        return None

    def extra_call(self) -> Finding | None:
        div = self.div
        att = attribute(self.record, self.states, div) if div is not None else None
        if att is None or div is None:
            return None
        # the alignment after the divergence or a rank test names the rank whose call is the extra one
        # (stronger than a majority: three ranks may all make the extra call and one meet it)
        div = dataclasses.replace(div, diverged=att.culprits, kind="extra-call", exclusive=True)
        if att.routine is not None:  # where the culprits left their routine, before the calls met
            pos = att.routine[0]
            div = dataclasses.replace(
                div, seq=pos, slots={r: sequence(self.record, r, div.group, pos, pos)[pos] for r in div.slots}
            )
        return explain(self._rc(div), att)

    def own_line(self) -> Finding | None:
        div = self.div
        return self._rc(div) if div is not None and div.exclusive else None

    def shape(self) -> Finding | None:
        div = self.div
        if div is not None and (div.kind == "shape-mismatch" or (self.size_err and div.kind != "exited")):
            return _from_div(
                self.record,
                HANG_SHAPE_MISMATCH,
                div,
                self.states,
                self.ev,
                "ranks passed different shapes/dtypes to the same collective",
            )
        return None

    def uneven(self) -> Finding | None:
        return self._uneven_finding() if self.lens_differ else None

    def exited(self) -> Finding | None:
        div = self.div
        if div is not None and div.kind == "exited":
            return _from_div(
                self.record, HANG_EARLY_EXIT, div, self.states, self.ev, "rank(s) exited while others waited"
            )
        return None

    def differ(self) -> Finding | None:
        div = self.div
        if div is None:
            return None
        return as_suspects(
            _from_div(
                self.record, HANG_DIVERGENT_COLLECTIVE, div, self.states, self.ev, "ranks issued different collectives"
            )
        )

    def uneven_steps(self) -> Finding | None:
        u = self.steps
        return _uneven_finding(self.record, self.states, *u, self.ev) if u and not u[1] else None

    def finished_early(self) -> Finding | None:
        if self.cut:
            return _cut_short(self.record, self.states, self.now, self.cfg)
        record, states = self.record, self.states
        ended = [s for s in states.values() if s.state == "finished"]
        others = [s for s in states.values() if not s.ended or s.state == "crashed"]
        if not ended or not others:
            return None
        locs = [l for s in ended if (l := slot_loc(record, s.rank, Slot(ABSENT), states, "exited"))]
        locs += [l for s in others if (l := best_where(record, s, "waiting"))]
        gone = [s.rank for s in ended]
        return Finding(
            HANG_EARLY_EXIT,
            "error",
            f"{ranks_phrase(gone)} finished while {ranks_phrase([s.rank for s in others])} still needed them",
            HINTS[HANG_EARLY_EXIT],
            tuple(sorted(states)),
            tuple(locs),
            self.ev,
            culprits=tuple(sorted(gone)),
        )

    def program(self) -> Finding | None:
        # every group's own sequence agrees or only shows a rank behind: the ranks' orders across the groups
        # name the rank that made one call more or fewer (a device mesh's tp and dp groups)
        if self.cut or self.verdict is None:
            return None
        return program_finding(self.record, self.states, self.ev)

    def receive_cycle(self) -> Finding | None:
        return None if self.cut or self.verdict is None else receive_cycle(self.states)

    def own_routine(self) -> Finding | None:
        # the stages of a pipeline run different programs: each rank against its own earlier steps
        return None if self.cut or self.verdict is None else own_routine_finding(self.record, self.states, self.ev)

    def pending_calls_differ(self) -> Finding | None:
        # the walk found no parting (a rank's flight record lost, its peers' torch-made calls set aside), yet
        # the ranks' pending calls at one position can never meet: a divergence there, its side unknown
        got = judge.pending_parting(self.facts) if not self.cut else None
        if got is None:
            return None
        group, seq, calls = got
        pend = {r: self.states[r].pending or {} for r in calls}
        slots = {
            r: Slot(
                c.op,
                tuple(pend[r]["site"][:2]) if pend[r].get("site") else None,
                pend[r].get("shapes"),
                dtypes=pend[r].get("dtypes"),
            )
            for r, c in calls.items()
        }
        odd = judge.rarest({r: c.key for r, c in calls.items()}) or tuple(sorted(calls))
        kind = "shape-mismatch" if len({c.op for c in calls.values()}) == 1 else "op-mismatch"
        div = Divergence(group, seq, slots, odd, kind)
        fid = HANG_SHAPE_MISMATCH if kind == "shape-mismatch" else HANG_DIVERGENT_COLLECTIVE
        what = (
            "ranks passed different shapes/dtypes to the same collective"
            if kind == "shape-mismatch"
            else "ranks wait in different collectives at one position"
        )
        f = _from_div(self.record, fid, div, self.states, dict(self.ev, pending_only=True), what)
        return f if len(odd) < len(calls) else as_suspects(f)

    def timeout(self) -> Finding | None:
        if self.cut:
            return None
        return timeout_finding(self.record, self.states, self.now, self.cfg, self.ev)


def _reached_by_abort(
    record: RunRecord, states: dict[int, RankState], aborted: list[int]
) -> tuple[dict[int, RankState], dict[str, int]]:
    """gloo aborts a rank on a size mismatch when a peer's data for the same position arrives: both had
    issued a collective at that position, the newest any rank is known to have issued (every rank's
    ledger is written before each call and survives the abort). A rank whose position is known only from
    a heartbeat older than that (the aborted rank, or a peer torchrun ended before it finished or beat
    again, whether or not it had raised the transport error its peer's abort gave it) is lifted to it; its ledger says whether its collective there was a Python one, else it
    was an internal one (DDP's). Returns the states and {rank: lifted position}."""
    if not aborted:
        return states, {}
    top: dict[str, int] = {}
    known: dict[int, dict[str, int]] = {}
    for r, st in states.items():
        seq = {g: int(n) for g, n in (st.seq or {}).items()}
        for e in record.ranks[r].ledger[-4:]:
            if e.get("group") is not None and e.get("seq"):
                seq[e["group"]] = max(seq.get(e["group"], 0), int(e["seq"][1]))
        known[r] = seq
        for g, n in seq.items():
            top[g] = max(top.get(g, 0), n)
    lifted: dict[str, int] = {}
    out = dict(states)
    for r, st in states.items():
        rec = record.ranks[r]
        # a peer that raised a transport error was inside a collective when the aborted rank went away: it
        # is lifted like one that never raised (torchrun's SIGTERM may end it before its finish event, which
        # a loaded host makes likely); an error of its own says nothing of where it stood
        own_error = rec.error is not None and r not in aborted and not is_transport_error(rec.error)
        if rec.event(schema.K_FINISH) is not None or not st.seq or own_error:
            continue
        seq = dict(st.seq)
        for g, n in top.items():
            if g in seq and known[r].get(g, 0) < n:
                seq[g] = n
                lifted[str(r)] = n
        if seq != st.seq:
            out[r] = dataclasses.replace(st, seq=seq)
    return out, lifted


def _departed(record: RunRecord, div: Divergence) -> tuple[tuple[int, ...], Departure] | None:
    """Some ranks all left the loop (or call) the others are still in: an early exit (``paths.departed``).
    The leavers are the diverged ranks or, with no majority to tell, whichever group of ranks (by what they
    issued) left. Not when their collective sits under a rank test (``if rank == 0:``): that is a
    rank-conditional call."""
    groups: dict[tuple, list[int]] = {}
    for r, sl in sorted(div.slots.items()):
        groups.setdefault((sl.key(), sl.site), []).append(r)
    candidates = [tuple(div.diverged)] if len(div.diverged) < len(div.slots) else [tuple(g) for g in groups.values()]
    return departed(record, candidates, div.slots, lambda d: rank_guard(record, d, div.slots[d].site) is not None)


def _early_exit(
    record: RunRecord, div: Divergence, states: dict[int, RankState], ev: dict, leavers: tuple[int, ...], dep: Departure
) -> Finding:
    gone = sorted(leavers)
    stay = sorted(r for r in div.slots if r not in gone)
    locs = [l for r in gone if (l := slot_loc(record, r, div.slots[r], states, "left early, waits here"))]
    # the break/return each rank that left may have taken (when the code has only a few)
    ways, exits_at = ways_out(dep.exit_file, dep.exits, gone, record.world_size or len(states))
    locs += ways
    where = "the loop it left" if dep.how == "left the loop" else "the call it returned from"
    locs += [Location(r, dep.file, dep.line, dep.func, where) for r in gone]
    locs += [l for r in stay if (l := slot_loc(record, r, div.slots[r], states, "waiting"))]
    left = dep.words()
    waits = group_values({r: slot_text(div.slots[r]) for r in gone}, bare=True)
    went = group_values(
        {r: (state_text(states[r]) if div.slots[r].op == INTERNAL else slot_text(div.slots[r])) for r in stay},
        bare=True,
    )
    base = dep.exit_file.rsplit("/", 1)[-1]
    exits = f" (the loop is left at {', '.join(f'{base}:{x}' for x in exits_at[:3])})" if exits_at else ""
    msg = (
        f"{ranks_phrase(gone)} {left}{exits} and wait in {waits}; {ranks_phrase(stay)} went on: {went} "
        f"(collective #{div.seq} of group {div.group})"
    )
    ev = dict(
        ev,
        divergence={"group": div.group, "seq": div.seq, "diverged": gone},
        departure={"how": dep.how, "file": dep.file, "line": dep.line},
    )
    return Finding(
        HANG_EARLY_EXIT,
        "error",
        msg,
        hint_for(record, HANG_EARLY_EXIT),
        tuple(sorted(div.slots)),
        tuple(locs),
        ev,
        culprits=tuple(gone),
    )


def _cut_short(record: RunRecord, states: dict[int, RankState], now: float, cfg: Config) -> Finding | None:
    """torchrun ended some ranks that had not finished (because another rank failed at exit, say): judge
    only what the record proves, i.e. a rank that finished while another had gone further."""
    if record.monitor_event(schema.K_EXIT) is None or record.monitor_event(schema.K_KILL) is not None:
        return None
    done = [s for s in states.values() if s.state == "finished"]
    cut = [s for s in states.values() if not s.ended and s.state != "not-started"]
    if not done or not cut:
        return None
    ev = {"reason": "ranks ended by torchrun before finishing", "live": None}
    uneven = _uneven(record, states)
    if uneven and uneven[1] and len(set(uneven[1].values())) > 1:
        return _uneven_finding(record, states, *uneven, ev)
    div = first_divergence(record, states)
    if div is not None and div.kind == "exited":
        return _from_div(record, HANG_EARLY_EXIT, div, states, ev, "rank(s) exited while others went on")
    fewer = [s for s in done if any(s.ddp_fwd < c.ddp_fwd for c in cut)]
    if fewer:
        locs = [l for s in fewer if (l := slot_loc(record, s.rank, Slot(ABSENT), states, "exited"))]
        locs += [l for s in cut if (l := best_where(record, s, "went on"))]
        steps = group_values({s.rank: str(s.ddp_fwd) for s in states.values()})
        return Finding(
            HANG_EARLY_EXIT,
            "error",
            f"{ranks_phrase([s.rank for s in fewer])} finished after fewer DDP steps "
            f"({steps}) while the others went on",
            HINTS[HANG_EARLY_EXIT],
            tuple(sorted(states)),
            tuple(locs),
            ev,
            culprits=tuple(sorted(s.rank for s in fewer)),
        )
    return None


def _exit_guess(record: RunRecord, rank: int, div: Divergence, states: dict[int, RankState]) -> list[Location]:
    """A rank that exited without a Python collective on its ledger: the ways out of the loops the others
    are still in (break, return, sys.exit), and their line, where it made its last DDP step with them."""
    w = next((l for r in div.slots if r not in div.diverged and (l := best_where(record, states[r], ""))), None)
    if w is None:
        return []
    out = ways_out(w.file, loop_exits(w.file, w.line, every_loop=True), [rank], record.world_size or len(states))[0]
    return out + [Location(rank, w.file, w.line, w.func, "its last DDP step with the others")]


def _from_div(
    record: RunRecord, fid: str, div: Divergence, states: dict[int, RankState], ev: dict, what: str
) -> Finding:
    locs = []
    culprit_role = {HANG_EARLY_EXIT: "exited", HANG_SHAPE_MISMATCH: "diverged (shape)"}.get(fid, "diverged")
    for r in sorted(div.slots):
        role = culprit_role if r in div.diverged else "waiting"
        l = slot_loc(record, r, div.slots[r], states, role)
        if l:
            locs.append(l)
        ledger = record.ranks[r].ledger
        # an exited rank whose last collective was torch's own (DDP's buckets: the recorder's entry, at the
        # line of backward), not a Python call of its own: where it left is guessed from the loops too
        if div.kind == "exited" and r in div.diverged and (not l or (ledger and ledger[-1].get("src") == "flight")):
            locs += _exit_guess(record, r, div, states)
    # culprits first, then the others, ranks with the same slot grouped
    desc = group_values({r: slot_text(sl) for r, sl in div.slots.items()}, first=div.diverged)
    msg = (
        f"{what}: first divergence at collective #{div.seq} of group {div.group} ({desc}); "
        f"diverged: {ranks_phrase(div.diverged)}"
    )
    if ev.get("aborted"):
        msg += f"; gloo aborted {ranks_phrase(ev['aborted'])} (data size mismatch)"
    blocked = {r: f"{at(s.blocked)}{code(s.blocked)}" for r, s in states.items() if s.blocked is not None}
    if blocked:
        # asynchronous collectives: where each rank's CPU waits (Work.wait(), .item(), synchronize)
        msg += f"; blocked at a sync point: {group_values(blocked)}"
        locs += [s.blocked for s in states.values() if s.blocked is not None]
    ev = dict(ev, divergence={"group": div.group, "seq": div.seq, "diverged": list(div.diverged)})
    return Finding(
        fid,
        "error",
        msg,
        hint_for(record, fid),
        tuple(sorted(div.slots)),
        tuple(locs),
        ev,
        culprits=tuple(sorted(div.diverged)),
    )
