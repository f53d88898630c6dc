"""Torch's flight-recorder dumps as the hang policy's case (policy.py): the dumps' answers to the policy's
questions, from each rank's oldest pending call (``sources.flight.Stand``), every group's positions, each
rank's calls in order and, where the dumps have them, the frames. A question a dump cannot answer (a rank
test needs the ranks that ended; DDP steps are not recorded) is left to the sources that can. The culprit
never rests on the frames alone: a JSON dump has none, and the same job's pickle and JSON dumps name the same
ranks. Pure: no torch (the dumps are already read)."""

from __future__ import annotations

import dataclasses
import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ddpdoctor.analysis.findings import Finding, Location, Severity, ranks_phrase
from ddpdoctor.analysis.hang import judge, paths, policy, programs
from ddpdoctor.analysis.hang.attach import STACKS_ONLY
from ddpdoctor.analysis.hang.facts import RankFacts, RankTest, Slot
from ddpdoctor.analysis.hang.hints import HINTS
from ddpdoctor.analysis.hang.sources.flight import Stand, made_before, members, used_groups, user_frame, user_frames
from ddpdoctor.analysis.hang.sources.flight import descs as group_descs
from ddpdoctor.analysis.hang.sources.flight import facts as flight_facts
from ddpdoctor.analysis.hang.sources.flight import programs as dump_programs
from ddpdoctor.analysis.ids import (
    HANG_DIVERGENT_COLLECTIVE,
    HANG_RANK_CONDITIONAL_COLLECTIVE,
    HANG_SHAPE_MISMATCH,
    HANG_TIMEOUT,
    HANG_TRANSPORT_STALL,
    POSTMORTEM_NO_DUMP,
)
from ddpdoctor.postmortem.errorfiles import RankError
from ddpdoctor.postmortem.flight import Dump, Entry, Kind, agreement, compared_outputs
from ddpdoctor.postmortem.inputs import Inputs


class DumpCase(policy.Case):
    """The dumps of one job as the policy's case. ``stands``: each dumped rank's oldest pending call and
    last call; ``world``: every rank the records name (``known``: named by something other than the dumps
    themselves); ``missing``: the ranks that left no dump; ``fails``: torchrun's failures per rank;
    ``torn``: the ranks torchrun ended (SIGTERM) after another rank exited first."""

    source = "dumps"

    def __init__(
        self,
        inp: Inputs,
        stands: dict[int, Stand],
        world: set[int],
        known: bool,
        missing: list[int],
        fails: dict[int, list[RankError]],
        torn: set[int],
    ) -> None:
        self.inp, self.stands, self.world, self.known = inp, stands, world, known
        self.missing, self.fails, self.torn = missing, fails, torn
        self.stuck = {r: s for r, s in stands.items() if s.pending is not None}
        self.facts = flight_facts(inp, stands, missing)
        can = {policy.POSITIONS, policy.HISTORY}
        if fails:
            can.add(policy.FAILURES)
        if any(d.stacks for d in inp.dumps.values()):
            can.add(policy.LINES)
        self.can = frozenset(can)
        self._groups: dict[str, set[int]] = {}
        self._waits: tuple[dict[int, set[int]], list[int]] | None = None

    def lend(self, f: Finding) -> Finding:
        # the stacks' finding: no longer resting on stacks alone; the dumps add each pending call's group and
        # position (the stacks hold none)
        said = "; ".join(_pending_phrase(r, p) for r, s in sorted(self.stuck.items()) if (p := s.pending) is not None)
        msg = f.message.replace(" [stacks only]", "")
        msg += (
            f" (the stacks; from the flight recorder: {said})"
            if said
            else " (the stacks; the flight recorder shows nothing pending)"
        )
        return dataclasses.replace(
            f,
            message=msg,
            hint=f.hint.replace(f" {STACKS_ONLY}", ""),
            evidence={**f.evidence, "source": "stacks (py-spy) and the flight recorder"},
        )

    def _members(self, g: str) -> set[int]:
        if g not in self._groups:
            self._groups[g] = members(self.inp, g, self.world)
        return self._groups[g]

    def _chains(self) -> tuple[dict[int, set[int]], list[int]]:
        """Who each waiting rank waits for, and the ranks at the ends of those chains: they wait for nobody
        (a rank that dumped with nothing pending, an empty dump, no dump, or one inside an op its peers
        issued too that does not complete: a GPU or NCCL fault there)."""
        if self._waits is None:
            waits, unknown = judge.waits_graph(self.facts, self._members)
            unmet = {r: waits.get(r, set()) for r in self.stuck}
            self._waits = (unmet, judge.chain_ends(unmet, unknown))
        return self._waits

    def _hung(self) -> bool:
        """Some rank that dumped has a call pending, and the dumps name the others (else: ``alone``)."""
        return bool(self.stuck) and not self._alone()

    def _alone(self) -> bool:
        return not self.known and len(self.inp.dumps) == 1

    def alone(self) -> Finding | None:
        # one dump and nothing that names the others: "every rank waits" would be this rank alone
        return _alone(self.inp, self.stands) if self._alone() else None

    def teardown(self) -> Finding | None:
        torn = self.torn & set(self.missing)
        if not self._hung() or not torn:
            return None
        first = _first_call_stranded(self.inp, self.stuck, torn)
        return _unseen(first, sorted(set(self.missing) - torn)) if first is not None else None

    def waited_for_no_record(self) -> Finding | None:
        if not self._hung() or not self.missing:
            return None
        unmet, _ = self._chains()
        if all(u <= set(self.missing) for u in unmet.values()):
            return _no_dump(self.inp, self.stands, self.missing, self.stuck, "error")
        return None

    def extra_call(self) -> Finding | None:
        # a waiting rank whose calls are the idle rank's with one more in between: not the idle rank behind,
        # but an extra call that completed against another one and shifted every call after it
        if not self._hung():
            return None
        _, roots = self._chains()
        inserted = _inserted(self.inp, self.stuck, [r for r in roots if r not in self.stuck])
        return _unseen(inserted, self.missing) if inserted is not None else None

    def behind(self) -> Finding | None:
        # a rank behind (nothing pending, an empty or no dump) is the strongest evidence; a rank inside an op
        # its peers issued too is one only where no rank's pending call is an extra one
        if not self._hung():
            return None
        unmet, roots = self._chains()
        if roots and (any(p not in self.stuck for p in roots) or not _extra(self.inp, self.stuck)):
            return _unseen(_behind(self.inp, self.stuck, roots, self.missing, unmet), self.missing)
        return None

    def own_routine(self) -> Finding | None:
        # pipeline stages on gloo: its recorder leaves send/recv out, its op ids count them; the one rank whose
        # step left out a point-to-point call its own earlier steps made (asked before `behind`: the stage it
        # starved waits in a receive with nothing pending in its dump, and reads as behind), or made one
        # collective more (asked before `one_place`: the extra call met the others' next one, and the ranks
        # then wait at one position in calls that differ, which names the rank but not its extra call)
        if not self._hung() or self.missing:
            return None
        return _own_routine(self.inp, self.stuck)

    def program(self) -> Finding | None:
        # every group's own sequence agrees or shows a rank behind, and the waits are a cycle across groups:
        # the ranks' orders name the rank that made one call more or fewer (a device mesh's tp and dp)
        if not self._hung():
            return None
        found = _program(self.inp, self.stuck)
        return _unseen(found, self.missing) if found is not None else None

    def _apart(self) -> bool:
        unmet, _ = self._chains()
        keys = {r: (s.pending.group, s.pending.seq) for r, s in self.stuck.items() if s.pending}
        return len(set(keys.values())) > 1 or any(unmet.values())

    def one_place(self) -> Finding | None:
        if not self._hung() or self._apart():
            return None
        return _unseen(_same_collective(self.inp, self.stuck, self.world, self.facts), self.missing)

    def different_calls(self) -> Finding | None:
        if not self._hung() or not self._apart():
            return None
        unmet, _ = self._chains()
        keys = {r: (s.pending.group, s.pending.seq) for r, s in self.stuck.items() if s.pending}
        return _unseen(_divergence(self.inp, self.stuck, keys, unmet), self.missing)

    def no_record(self) -> Finding | None:
        # never OK for want of evidence: what a rank without a dump did is unknown
        if self.stuck or self._alone() or not (self.missing and self.known):
            return None
        lost = {r: es for r, es in self.fails.items() if any(e.victim for e in es)}
        return _no_dump(self.inp, self.stands, self.missing, waiting={}, severity="error", lost=lost)

    def empty_records(self) -> Finding | None:
        if not (self.stuck or self._alone() or (self.missing and self.known)):
            got = _empty_dumps(self.inp)
            if got:
                return got[0]
        # the last question: nothing above answered, and a ring with a hole could have lost the answer
        holed = _holed_dumps(self.inp)
        return holed[0] if holed else None


NO_DUMP_HINT = (
    "A rank that crashed or was killed (SIGKILL, the OOM killer, a node lost) writes no dump: read its own "
    "log and exit status first (torchrun's failure summary, `dmesg` for the OOM killer). Dump to a shared "
    "folder (TORCH_FR_DUMP_TEMP_FILE on persistent storage) so every rank's dump survives the job."
)


BEHIND_HINT = (
    "The named ranks never issued the collective the others wait in: look at what they were doing after their "
    "last collective (their own log and traceback, `py-spy dump --pid` on a live rank, `ddpdoctor attach`): a "
    "slow or stuck data loader, rank-only work (evaluation, checkpointing), an uneven number of batches. A rank "
    "that left an empty dump may have held the GIL or had TORCH_FR_BUFFER_SIZE=0."
)


STUCK_HINT = (
    "The named ranks are inside an op every rank they need issued too, and it does not complete there: look at "
    "those ranks' hosts first (GPU errors in `dmesg`/`nvidia-smi`, NCCL_DEBUG=INFO, the network interface)."
)


def _loc(rank: int, frame: tuple[str, int, str] | None, role: str) -> list[Location]:
    return [Location(rank, frame[0], frame[1], frame[2], role)] if frame else []


def _at(frame: tuple[str, int, str] | None) -> str:
    return f" at {os.path.basename(frame[0])}:{frame[1]}" if frame else ""


def _program(inp: Inputs, stuck: dict[int, Stand]) -> Finding | None:
    """The program judge (analysis/hang/programs.py) over the dumps' orders of calls: the rank that made one
    call more or one fewer, its group by its mesh dimension, its line where the dump has frames."""
    progs = dump_programs(inp.dumps)
    part = programs.program_parting(progs) if progs else None
    if progs is None or part is None:
        return None
    told = programs.tell(part, progs, group_descs(inp.dumps))
    victims = [r for r in sorted(inp.dumps) if r not in part.odd]
    locs = list(told.locations)
    where = {}
    for r in victims:
        e = stuck[r].pending if r in stuck else None
        where[r] = f"in {e.call()} (#{e.seq} of group {e.group}){_at(user_frame(e))}" if e else "nothing pending"
        locs += _loc(r, user_frame(e), "victim") if e else []
    stranded = "; ".join(f"rank {r} {w}" for r, w in where.items())
    ev = {"source": "flight recorder"}
    return programs.finding(
        part, told, stranded, tuple(sorted(inp.dumps)), tuple(locs), ev, HINTS[HANG_RANK_CONDITIONAL_COLLECTIVE]
    )


def _first_call_stranded(inp: Inputs, stuck: dict[int, Stand], torn: set[int]) -> Finding | None:
    """The dump-and-exit race: a rank's watchdog dumped and ended it while it waited in its first call on a
    group (a call it had never made, on a group no other dump shows), and torchrun then ended the ranks that
    left no dump (``torn``: SIGTERM after that rank's exit) before their own watchdogs dumped. Those ranks are
    victims of the teardown, not a crash: had they reached that call, it would have completed. The rank in its
    first call on the group is the culprit, at its line where the dump has frames (the finding never depends
    on them). None where a dumped rank waits elsewhere or the call is not its first on the group."""
    if not stuck or len(stuck) != len(inp.dumps):
        return None
    pend = {r: s.pending for r, s in stuck.items() if s.pending is not None}
    fresh = {
        r: e
        for r, e in pend.items()
        if not e.is_p2p
        and e.seq == 1
        and not any(e.group in inp.dumps[q].group_index for q in inp.dumps if q != r)
        and any(g != e.group for g in inp.dumps[r].group_index)
    }
    if not fresh or len(fresh) != len(pend):
        return None
    said = "; ".join(
        f"rank {r} waits in {e.call()} (#{e.seq} of group {e.group}){_at(user_frame(e))}" for r, e in fresh.items()
    )
    msg = (
        f"a collective is called on some ranks only: {said}, its first call on that group, which "
        f"{ranks_phrase(sorted(torn))} never made; {ranks_phrase(sorted(torn))} "
        f"{'was' if len(torn) == 1 else 'were'} ended by torchrun (SIGTERM) after {ranks_phrase(sorted(fresh))} "
        "exited: a victim of the teardown, with no dump of its own"
    )
    locs = [loc for r, e in sorted(fresh.items()) for loc in _loc(r, user_frame(e), "diverged")]
    e0 = next(iter(fresh.values()))
    return Finding(
        HANG_RANK_CONDITIONAL_COLLECTIVE,
        "error",
        msg,
        HINTS[HANG_RANK_CONDITIONAL_COLLECTIVE],
        tuple(sorted(set(inp.dumps) | torn)),
        tuple(locs),
        {
            "source": "flight recorder",
            "divergence": {"group": e0.group, "seq": e0.seq, "diverged": sorted(fresh)},
            "teardown": sorted(torn),
        },
        culprits=tuple(sorted(fresh)),
    )


def _key(e: Entry | Kind) -> tuple:
    """What two ranks' calls at one position share when they are the same call: what must agree, and the line."""
    f = user_frame(e)
    return (*agreement(e), f[:2] if f else None)


def _inserted(inp: Inputs, stuck: dict[int, Stand], idle: list[int]) -> Finding | None:
    """A waiting rank made one call more than an idle rank (one with nothing pending): their calls on the
    waiting rank's group agree up to a position where the waiting rank's call is one the idle rank never made
    (its op, shapes and line appear nowhere in the idle rank's records), and from there the waiting rank's
    calls are the idle rank's shifted by one, its pending call last. gloo lets an extra call complete against
    another rank's next call of the same size (torch's own analyzer test, case 6, made real:
    tests/frjobs/torchcases.py extra-coalesced), and an extra all-reduce of fewer elements finish on its own side
    while the others wait on (tests/frjobs/pipejob.py extra, three ranks: the extra call's rank completed it, the
    others never did). Either way the waiting rank is left in a call nobody else will make. The idle rank is not
    behind: the waiting rank made the extra call. Needs at least one shifted call to agree after the extra one;
    None otherwise."""
    keys = _KeySeqs()
    for w in sorted(stuck):
        p = stuck[w].pending
        if p is None or p.is_p2p:
            continue
        dw = inp.dumps[w]
        a, mine = keys.upto(dw, p.group, p.seq)
        for b in idle:
            d = inp.dumps.get(b)
            if d is None:
                continue
            t, theirs = keys.of(d, p.group)
            if not t or len(a) != len(t) + 1:
                continue
            if a[: len(t)] == t:
                continue  # no call of the waiting rank's differs from the idle rank's: none is extra
            i = next(k for k in range(len(t)) if a[k] != t[k])
            # its call at i is one the idle rank never made, and every call after it is the idle rank's from i
            if a[i] in t or judge.insertion(a[i:], t[i:]) != len(t) - i:
                continue
            extra, met = dw.entry(mine[i]), d.entry(theirs[i])
            mine_b, theirs_b = _nbytes(extra), _nbytes(met)
            if mine_b is None or theirs_b is None:
                size = ""
            elif mine_b == theirs_b:
                size = " (the same number of bytes)"
            else:
                size = f" ({mine_b} bytes against {theirs_b}: it finished on rank {w}'s side only)"
            msg = (
                f"rank {w} made an extra {extra.call()} (#{extra.seq} of group {extra.group}){_at(user_frame(extra))} "
                f"that rank {b} never made: it completed against rank {b}'s {met.call()}{_at(user_frame(met))}{size}, "
                f"and every call after it is shifted by one: rank {w} now waits in "
                f"{p.call()} (#{p.seq}){_at(user_frame(p))}, which rank {b} made already as #{met.seq}; diverged: "
                f"rank {w}"
            )
            locs = _loc(w, user_frame(extra), "diverged") + _loc(w, user_frame(p), "waiting")
            locs += _loc(b, user_frame(met), "its call the extra one met")
            return Finding(
                HANG_RANK_CONDITIONAL_COLLECTIVE,
                "error",
                f"a collective is called on some ranks only: {msg}",
                HINTS[HANG_RANK_CONDITIONAL_COLLECTIVE],
                tuple(sorted({w, b})),
                tuple(locs),
                {"source": "flight recorder", "inserted": {"rank": w, "group": extra.group, "seq": extra.seq}},
                culprits=(w,),
            )
    return None


# bytes per element of the dtypes the flight recorder names (c10 ScalarType names)
_ITEMSIZE = {
    "Bool": 1,
    "Byte": 1,
    "Char": 1,
    "Short": 2,
    "Half": 2,
    "BFloat16": 2,
    "Int": 4,
    "Float": 4,
    "Long": 8,
    "Double": 8,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
}


def _nbytes(e: Entry) -> int | None:
    """The bytes of an entry's inputs, or None where a dtype is not known or the counts do not pair up."""
    if len(e.dtypes) != len(e.input_sizes):
        return None
    total = 0
    for shape, dt in zip(e.input_sizes, e.dtypes):
        size = _ITEMSIZE.get(dt)
        if size is None:
            return None
        total += math.prod(shape) * size
    return total


class _KeySeqs:
    """Per rank and group: the ``_key`` of each collective entry, oldest first, and the entries' positions.
    A key is one per Kind, and equal keys are one object, so comparing two ranks' sequences is a C loop over
    pointers (every waiting rank's sequence is compared with the idle rank's)."""

    def __init__(self) -> None:
        self._intern: dict[tuple, tuple] = {}
        self._seqs: dict[tuple[int, str], tuple[list[tuple], Sequence[int]]] = {}

    def of(self, d: Dump, group: str) -> tuple[list[tuple], Sequence[int]]:
        got = self._seqs.get((d.rank, group))
        if got is None:
            kk = [self._intern.setdefault(key, key) for key in map(_key, d.kinds)]
            idx = d.group_index.get(group, ())
            got = (list(map(kk.__getitem__, map(d.kind.__getitem__, idx))), idx)
            self._seqs[(d.rank, group)] = got
        return got

    def upto(self, d: Dump, group: str, seq: int) -> tuple[list[tuple], Sequence[int]]:
        """The keys and positions of the entries of ``group`` up to sequence id ``seq``."""
        keys, idx = self.of(d, group)
        seqs = [d.seq[i] for i in idx] if not isinstance(idx, range) else d.seq
        if not seqs or max(seqs) <= seq:
            return keys, idx
        sel = [j for j, s in enumerate(seqs) if s <= seq]
        return [keys[j] for j in sel], [idx[j] for j in sel]


def _unseen(f: Finding, missing: list[int]) -> Finding:
    """The finding, saying which ranks left no dump where it does not blame them: no rank is seen waiting for
    them, but what they did is unknown, and they are never dropped silently."""
    unseen = sorted(set(missing) - set(f.culprits))
    if not unseen:
        return f
    it = "it" if len(unseen) == 1 else "they"
    return dataclasses.replace(
        f,
        message=f"{f.message}; {ranks_phrase(unseen)} left no flight-recorder dump: where {it} stood is unknown",
        evidence={**f.evidence, "missing": unseen},
    )


def _pending_phrase(r: int, e: Entry) -> str:
    return f"rank {r} in {e.call()} (#{e.seq} of group {e.group}){_at(user_frame(e))}"


def _behind(
    inp: Inputs, stuck: dict[int, Stand], roots: list[int], missing: list[int], unmet: dict[int, set[int]]
) -> Finding:
    """The ranks the others wait for, directly or through a chain of waiting ranks, that wait for nobody:
    behind (nothing pending, an empty dump), without a dump, or inside an op their peers issued too."""
    direct = sorted(r for r in stuck if set(roots) & unmet.get(r, set()))
    idle = [r for r in roots if r not in stuck]
    inside = [r for r in roots if r in stuck]
    parts = []
    for r in roots:
        d = inp.dumps.get(r)
        if d is None:
            parts.append(f"rank {r} left no flight-recorder dump")
        elif not d.n_entries:
            parts.append(f"rank {r} left an empty dump (0 entries)")
        elif r in stuck:
            p = stuck[r].pending
            assert p is not None
            parts.append(f"{_pending_phrase(r, p)} that every rank it needs issued too, and it does not complete there")
        else:
            w = next(stuck[x].pending for x in direct if r in unmet[x])
            assert w is not None
            if w.is_p2p:
                parts.append(f"rank {r} has nothing pending on group {w.group}")
            else:
                parts.append(f"rank {r} issued group {w.group}'s collectives up to #{d.enqueued(w.group)}")
    waits = "; ".join(_pending_phrase(r, p) for r in direct[:4] if (p := stuck[r].pending) is not None)
    if len(direct) > 4:
        waits += f"; and {len(direct) - 4} more"
    verb = "waits" if len(direct) == 1 else "wait"
    msg = f"{ranks_phrase(direct)} {verb} for {ranks_phrase(roots)} ({waits}): " + "; ".join(parts)
    if idle:
        msg += (
            f"; {ranks_phrase(idle)} {'is' if len(idle) == 1 else 'are'} behind, busy outside any collective "
            "(compute, data loading, I/O, a Python loop) or stuck there: the flight recorder cannot see where"
        )
    if inside:
        msg += f"; {ranks_phrase(inside)} may have a GPU, NCCL or network fault"
    rest = sorted(set(stuck) - set(direct) - set(roots))
    if rest:
        msg += f"; {ranks_phrase(rest)} wait for ranks that wait for {'it' if len(roots) == 1 else 'them'}"
    lasts = {r: d.last() if (d := inp.dumps.get(r)) else None for r in idle}
    locs = [loc for r in idle for loc in _loc(r, user_frame(lasts[r]), "last collective")]
    locs += [loc for r in inside for loc in _loc(r, user_frame(stuck[r].pending), "stuck")]
    locs += [loc for r in direct for loc in _loc(r, user_frame(stuck[r].pending), "waiting")]
    ev = {
        "source": "flight recorder",
        "roots": roots,
        "waits_for": {str(r): sorted(u) for r, u in sorted(unmet.items()) if u},
        "missing": missing,
    }
    fid = HANG_TIMEOUT if idle else HANG_TRANSPORT_STALL
    return Finding(
        fid,
        "error",
        msg,
        BEHIND_HINT if idle else STUCK_HINT,
        tuple(sorted(set(roots) | set(stuck))),
        tuple(locs),
        ev,
        culprits=tuple(roots),
    )


_P2P_HOLE = ("<p2p>",)  # an op id gloo's recorder counted and left no entry for: a send or a recv


def _op_tokens(d: Dump, group: str) -> tuple[list[tuple], list[Entry | None]] | None:
    """The rank's calls on ``group`` in issue order: each entry's ``_key``, and a ``_P2P_HOLE`` for every op id
    no entry holds (between two entries; before the first where it is the group's first call; after the last,
    up to what pg_status says was enqueued: gloo does not count a receive still pending there); with them, the
    entry of each token (None for a hole). None where the dump is not in op units (only gloo's count p2p ops)."""
    if not d.op_units:
        return None
    idx = d.group_index.get(group, ())
    if not idx:
        return None
    # the last _LOOK calls are enough to read a routine (attribution.py and _routine look as far), and a
    # 2,000-entry ring of each of a thousand ranks is not built into entries for it
    es = [d.entry(i) for i in idx[-_LOOK:]]
    # from the group's first call where the ring still holds it (op ids start at 1): the p2p ops before it too
    out: list[tuple] = [_P2P_HOLE] * max(0, es[0].op_id - 1) if es[0].seq == 1 else []
    at: list[Entry | None] = [None] * len(out)
    for a, b in zip(es, es[1:]):
        out.append(_key(a))
        at.append(a)
        holes = max(0, b.op_id - a.op_id - 1)
        out += [_P2P_HOLE] * holes
        at += [None] * holes
    out.append(_key(es[-1]))
    at.append(es[-1])
    enq = max((st.last_enqueued for pg, st in d.pg_status.items() if d.group_of(pg) == group), default=0)
    holes = max(0, enq - es[-1].op_id)
    return out + [_P2P_HOLE] * holes, at + [None] * holes


def _own_routine(inp: Inputs, stuck: dict[int, Stand]) -> Finding | None:
    """``hang.rank-conditional-collective`` where one rank's step left out a point-to-point call or made one
    collective more: each rank's calls on the group of the pending calls, p2p ops as gloo's op ids count
    them, read against its own earlier steps (``programs.off_routine``: the stages of a pipeline run
    different programs by role, so no index compares across ranks); exactly one rank left its routine, every
    other rank is where its own routine has it. A skipped call's line is not in any dump (gloo records no
    p2p): the rank's next call, after the gap, is named. An extra collective is named at its own entry, at
    its line where the dump has frames (the reading itself never rests on them: a JSON dump names the same
    rank and position)."""
    groups = {s.pending.group for s in stuck.values() if s.pending is not None and not s.pending.is_p2p}
    if len(groups) != 1 or len(inp.dumps) < 2:
        return None
    (g,) = groups
    # only where some rank's op ids skip: a group without p2p ops (op ids and sequence ids step together) has
    # no call gloo left out of its ring, and the others' questions already read it
    if not any(
        (ops := d.group_ops(g)) and (seqs := d.group_seqs(g)) and ops[-1] - ops[0] != seqs[-1] - seqs[0]
        for d in inp.dumps.values()
        if d.op_units
    ):
        return None
    tokens = {r: _op_tokens(d, g) for r, d in sorted(inp.dumps.items())}
    got = programs.off_routine({r: t[0] if t else None for r, t in tokens.items()})
    if got is None:
        return None
    r, reading = got
    mine = tokens[r]
    assert mine is not None  # off_routine read its calls
    ents = mine[1]  # the entry of each of its calls (None: a p2p op)
    victims = sorted(x for x in inp.dumps if x != r)
    waits = "; ".join(
        _pending_phrase(v, p)
        if v in stuck and (p := stuck[v].pending) is not None
        else f"rank {v} has nothing pending on group {g} (in a send or recv, which gloo does not record)"
        for v in victims
    )
    locs = [loc for v in victims if v in stuck for loc in _loc(v, user_frame(stuck[v].pending), "victim")]
    extra = ents[reading.at] if reading.kind == "extra" and reading.at is not None else None
    if reading.kind == "skipped" and reading.call == _P2P_HOLE:
        after = stuck[r].pending if r in stuck else inp.dumps[r].last()
        msg = (
            f"a call is left out on one rank: rank {r} skipped a point-to-point call (a send or recv: gloo's flight "
            f"recorder does not record them, and its op ids count them) before "
            f"{after.call() if after else 'its last call'}{_at(user_frame(after))}, where each of its own earlier "
            f"steps made one; stranded: {waits}"
        )
        locs = _loc(r, user_frame(after), "after the skipped call") + locs
        how: dict[str, Any] = {"diverged": [r], "how": "own routine: skipped p2p", "group": g}
    elif extra is not None:
        assert reading.at is not None
        msg = (
            f"a collective is called on some ranks only: rank {r} made one {extra.call()} more (#{extra.seq} of "
            f"group {g}){_at(user_frame(extra))} than each of its own earlier steps made there (the stages' calls "
            f"differ by role, so each is read against its own routine, p2p ops counted by gloo's op ids)"
        )
        nxt = ents[reading.at + 1] if reading.at + 1 < len(ents) else None
        if nxt is not None and _key(nxt) == _key(extra):
            # two alike calls in a row, no line to tell them apart (a JSON dump): the second may as well be the
            # one made in place of the routine's next call; the rank and its step are the same either way
            msg += (
                f"; its next call, #{nxt.seq}, is alike and the dump holds no line to tell which of the two its "
                "routine does not make"
            )
        msg += f"; stranded: {waits}"
        locs = _loc(r, user_frame(extra), "extra call") + locs
        how = {"diverged": [r], "how": "own routine: extra call", "group": g, "seq": extra.seq}
    else:
        return None  # a left-out collective is read by the questions over every rank's calls
    return Finding(
        HANG_RANK_CONDITIONAL_COLLECTIVE,
        "error",
        msg,
        HINTS[HANG_RANK_CONDITIONAL_COLLECTIVE],
        tuple(sorted(inp.dumps)),
        tuple(locs),
        {"source": "flight recorder", "divergence": how},
        culprits=(r,),
    )


def _extra(inp: Inputs, stuck: dict[int, Stand]) -> dict[int, tuple[str, int, str] | None]:
    """The ranks whose pending call is the extra one, each with the line that is its own. A rank's
    pending stack holds a line no other rank's records hold while the others' lines are ones it used too
    (a shifted sequence: the live run's rule). Every user frame of the stack counts, not the innermost
    only: an extra call made through a helper shares the helper's line with the regular calls, and the
    line unique to the extra rank is the caller's. Without stacks: its group is one the others never used
    while theirs is one it used."""
    ranks = sorted(stuck)
    stacks = {r: [f[:2] for f in user_frames(stuck[r].pending)] for r in ranks}
    sites_of = {r: {f[:2] for k in inp.dumps[r].kinds for f in user_frames(k)} for r in ranks}
    own = judge.extra_callers(stacks, sites_of)
    if own:
        return {r: next(f for f in user_frames(stuck[r].pending) if f[:2] == site) for r, site in own.items()}
    group = {r: p.group for r in ranks if (p := stuck[r].pending) is not None}
    used = {r: used_groups(inp.dumps[r]) for r in ranks}
    extra = [
        r
        for r in ranks
        if all(group[r] not in used[o] for o in ranks if o != r) and all(group[o] in used[r] for o in ranks if o != r)
    ]
    if extra and len(extra) < len(ranks):
        return {r: user_frame(stuck[r].pending) for r in extra}
    return {r: user_frame(stuck[r].pending) for r in _rarer_call(inp, stuck)}


def _rarer_call(inp: Inputs, stuck: dict[int, Stand]) -> tuple[int, ...]:
    """Without a line of its own and where every group was used by every rank (a helper that all-reduces on a
    side group at step 0 on every rank, and once more under ``if rank == 1:`` at step 2): the ranks waiting on
    different groups whose pending call (group, op, sizes, dtypes) every rank made fewer times before than the
    others' pending call, which every rank made at least twice (the loop's regular call). The evidence is the
    dumps' entries alone, the same in a pickle and a JSON dump: the culprit never depends on the frames."""
    pend = {r: s.pending for r, s in stuck.items() if s.pending is not None}
    if len(pend) < 2 or len(pend) != len(stuck) or len({e.group for e in pend.values()}) < 2:
        return ()

    def key(e: Entry) -> tuple:
        return (e.group, *agreement(e))

    made: dict[int, Counter] = {
        r: Counter(key(x) for x in inp.dumps[r].entries if not x.is_p2p and x.record_id < e.record_id)
        for r, e in pend.items()
    }
    times = {r: min(made[q][key(e)] for q in pend) for r, e in pend.items()}
    low = min(times.values())
    odd = tuple(sorted(r for r, n in times.items() if n == low))
    rest = [times[r] for r in pend if r not in odd]
    return odd if rest and min(rest) >= 2 and min(rest) > low else ()


def _divergence(
    inp: Inputs, stuck: dict[int, Stand], keys: dict[int, tuple[str, int]], unmet: dict[int, set[int]]
) -> Finding:
    own = _extra(inp, stuck)
    extra = sorted(own)
    ev: dict[str, Any] = {
        "source": "flight recorder",
        "pending": {
            str(r): {
                "group": s.pending.group,
                "seq": s.pending.seq,
                "op": s.pending.op,
                "input_sizes": [list(x) for x in s.pending.input_sizes],
            }
            for r, s in stuck.items()
            if s.pending
        },
    }
    if extra:
        waiters = [r for r in sorted(stuck) if r not in extra]
        e = stuck[extra[0]].pending
        w = stuck[waiters[0]].pending if waiters else None
        assert e is not None
        locs = [loc for r in extra for loc in _loc(r, own[r], "diverged")]
        locs += [loc for r in waiters for loc in _loc(r, user_frame(stuck[r].pending), "waiting")]
        msg = (
            f"a collective is called on some ranks only: {ranks_phrase(extra)} made an extra {e.call()} on "
            f"group {e.group} (#{e.seq}){_at(own[extra[0]])} that {ranks_phrase(waiters)} never issued"
        )
        if w is not None:
            msg += (
                f"; {ranks_phrase(waiters)} wait{'s' if len(waiters) == 1 else ''} in {w.call()} "
                f"(#{w.seq} of group {w.group}){_at(user_frame(w))}"
            )
        msg += f"; diverged: {ranks_phrase(extra)}"
        ev["fr_trace_would_blame"] = sorted(unmet.get(extra[0], ()))
        return Finding(
            HANG_RANK_CONDITIONAL_COLLECTIVE,
            "error",
            msg,
            HINTS[HANG_RANK_CONDITIONAL_COLLECTIVE],
            tuple(sorted(stuck)),
            tuple(locs),
            ev,
            culprits=tuple(extra),
        )
    culprits = judge.rarest(keys)
    locs = [
        loc
        for r, s in sorted(stuck.items())
        for loc in _loc(r, user_frame(s.pending), "diverged" if r in culprits else "waiting")
    ]
    parts = "; ".join(
        f"rank {r}: {s.pending.call()} (#{s.pending.seq} of group {s.pending.group}){_at(user_frame(s.pending))}"
        for r, s in sorted(stuck.items())
        if s.pending
    )
    return Finding(
        HANG_DIVERGENT_COLLECTIVE,
        "error",
        f"ranks wait in different collectives: {parts}",
        HINTS[HANG_DIVERGENT_COLLECTIVE],
        tuple(sorted(stuck)),
        tuple(locs),
        ev,
        culprits=culprits,
    )


def signature(d: Dump, e: Entry) -> tuple:
    """What must agree across ranks at ``e``'s position: the op, shapes and dtypes of every entry with its
    (group, seq). NCCL records a coalesced group as one entry per op sharing the sequence id, closed by a
    ``coalesced`` entry; comparing the first one only turned a mismatch in the second into a stall."""
    if e.is_p2p:
        return ((e.op, e.input_sizes, e.dtypes, ()),)
    return d.signature_at(e.group, e.seq) or ((*agreement(e), compared_outputs(e.op, e.output_sizes, e.out_dtypes)),)


def _sizes(sizes: tuple) -> str:
    return ",".join("x".join(map(str, s)) or "scalar" for s in sizes)


def _calls(sig: tuple) -> str:
    """The calls of a signature: op([inputs]), and -> [outputs] where those are compared and differ from the
    inputs (an all-gather's list; an all-reduce whose output was recorded other than its input)."""
    return " + ".join(
        f"{op}([{_sizes(ins)}]{f' -> [{_sizes(outs[0])}]' if outs and outs[0] != ins else ''})"
        for op, ins, _, outs in sig
    )


# flattened collectives whose one output holds every rank's input (all-gather) or whose one input holds every
# rank's output (reduce-scatter), by the names torch's recorders write; and the ones whose output is the input
GATHERS = frozenset(
    {"all_gather", "_all_gather_base", "_allgather_base", "all_gather_into_tensor", "all_gather_into_tensor_coalesced"}
)


SCATTERS = frozenset(
    {"reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced"}
)


IN_PLACE = frozenset({"all_reduce", "allreduce_coalesced"})


def misfit(e: Entry, size: int) -> str | None:
    """How a call's recorded output does not fit its own input, or None: an in-place op whose output
    differs from its input, a flattened all-gather whose output is not ``size`` (the group's size) times its
    input, a reduce-scatter whose input is not ``size`` times its output. torch's analyzer checks the same of
    every pair; a call c10d accepted never records such sizes, so the records are the user's or a tool's."""
    ins, outs = e.input_sizes, e.output_sizes
    if not ins or not outs:
        return None
    if e.op in IN_PLACE and ins != outs:
        return f"{e.op} returns its input, but its output is recorded as [{_sizes(outs)}] for input [{_sizes(ins)}]"
    if size <= 0:
        return None
    # the list forms: one buffer per rank (torch's own hook records them so), or one stacked or flat buffer
    if e.op == "all_gather" and len(outs) > 1:
        return None if len(outs) == size else f"all_gather into a list of {len(outs)} buffers on {size} ranks"
    if e.op == "reduce_scatter" and len(ins) > 1:
        return None if len(ins) == size else f"reduce_scatter of a list of {len(ins)} buffers on {size} ranks"
    if e.op in GATHERS or e.op in SCATTERS:
        n_in, n_out = math.prod(ins[0]), math.prod(outs[0])
        if e.op in GATHERS and n_out != n_in * size:
            return f"{e.op} of {n_in} elements on each of {size} ranks gathers {n_in * size}, not {n_out}"
        if e.op in SCATTERS and n_in != n_out * size:
            return f"{e.op} of {n_in} elements over {size} ranks leaves {n_in // size} each, not {n_out}"
    return None


def _same_collective(inp: Inputs, stuck: dict[int, Stand], world: set[int], facts: Mapping[int, RankFacts]) -> Finding:
    pend = {r: s.pending for r, s in stuck.items() if s.pending}
    shapes = {r: signature(inp.dumps[r], e) for r, e in pend.items()}
    e0 = next(iter(pend.values()))
    ev = {"source": "flight recorder", "group": e0.group, "seq": e0.seq}
    size = len(members(inp, e0.group, world))
    bad = {r: why for r, e in pend.items() if (why := misfit(e, size))}
    # the walk over the one position they wait at (a position of the ranks' own calls: the walk the ledger
    # takes over its positions and the completed calls over theirs)
    slots = {r: Slot("+".join(x[0] for x in shapes[r]), _site(e), agree=shapes[r]) for r, e in pend.items()}
    part = next(judge.partings(sorted(pend), [(e0.group, e0.seq)], lambda r, _k: slots[r]), None)
    if bad and part is None:
        # every rank made the same call, and its sizes do not fit together: the call itself is wrong
        odd = tuple(sorted(bad))
        locs = [
            loc for r, e in sorted(pend.items()) for loc in _loc(r, user_frame(e), "mismatched" if r in odd else "")
        ]
        return Finding(
            HANG_SHAPE_MISMATCH,
            "error",
            f"collective #{e0.seq} of group {e0.group} does not fit its own sizes on {ranks_phrase(odd)}: "
            f"{bad[odd[0]]}{_at(user_frame(pend[odd[0]]))}",
            HINTS[HANG_SHAPE_MISMATCH],
            tuple(sorted(pend)),
            tuple(locs),
            ev,
            culprits=odd if len(odd) < len(pend) else (),
        )
    if part is not None:
        # where no call is rarer than another (two ranks), each rank's line is a side of the mismatch. One side's
        # call may be new while the other's continues what every rank did, but that names nobody: a rank that
        # left the loop early and a rank that made an extra call before (the sequence shifted, its extra call
        # met another's regular one) leave the same dumps; only lines or history tell them apart
        rare = part.odd if len(part.odd) < len(pend) else ()
        if not rare:
            # the source files the frames name (a pickle dump's) may say which side's call sits under a rank test
            # and whether a rank not led there had made that call before, from its earlier entries' frames
            n = len(world)
            tested = judge.rank_test(
                {r: facts[r] for r in pend if r in facts},
                lambda _r, c: paths.rank_test(c.sites, n),
                lambda q, c: q in inp.dumps and made_before(inp.dumps[q], c),
            )
            if tested is not None:
                return _guarded_finding(pend, shapes, *tested, ev)
            routine = _routine(inp, pend, e0.group, e0.seq)
            if routine is not None:
                return routine
        left = () if rare else _new_call(inp, pend, shapes)
        odd = part.odd
        fid = HANG_SHAPE_MISMATCH if part.kind == "shape-mismatch" else HANG_DIVERGENT_COLLECTIVE
        parts = "; ".join(
            f"rank {r}: {_calls(shapes[r])} {'/'.join(dict.fromkeys(t for x in shapes[r] for t in x[2]))}{_at(user_frame(e))}"
            for r, e in sorted(pend.items())
        )
        if left:
            stay = [r for r in sorted(pend) if r not in left]
            other = ranks_phrase(tuple(stay))
            parts += (
                f"; {ranks_phrase(left)} went on to a call no rank made before while {other} continue"
                f"{'s' if len(stay) == 1 else ''} the calls all made ({_calls(shapes[stay[0]])}): "
                f"either {ranks_phrase(left)} left the loop early, or {other} made an extra call earlier that met "
                "a regular one and shifted every call after it; the dumps cannot tell which"
                + (
                    ""
                    if all(user_frame(pend[r]) for r in pend)
                    else " without lines (the ranks' stacks or the ledger can)"
                )
            )
        locs = [
            loc
            for r, e in sorted(pend.items())
            for loc in _loc(r, user_frame(e), "diverged" if r in odd else "waiting")
        ]
        return Finding(
            fid,
            "error",
            f"collective #{e0.seq} of group {e0.group} differs across ranks: {parts}",
            HINTS[fid],
            tuple(sorted(pend)),
            tuple(locs),
            ev,
            culprits=odd if len(odd) < len(pend) else (),
        )
    locs = [loc for r, e in sorted(pend.items()) for loc in _loc(r, user_frame(e), "waiting")]
    return Finding(
        HANG_TRANSPORT_STALL,
        "error",
        f"every rank issued {e0.call()} (#{e0.seq} of group {e0.group}){_at(user_frame(e0))} and "
        "none completed it: the code paths agree, the transport does not deliver",
        HINTS[HANG_TRANSPORT_STALL],
        tuple(sorted(pend)),
        tuple(locs),
        ev,
        culprits=(),
    )


_LOOK = 512  # calls looked back for a routine (analysis/hang/attribution.py looks as far)


def _routine(inp: Inputs, pend: dict[int, Entry], group: str, seq: int) -> Finding | None:
    """The ranks that left the routine of their earlier steps on ``group`` (``judge.routine`` over each
    rank's calls by sequence id: op and sizes, and the line where the dump has frames), named at the call the
    routine had there: a rank that skips a block's forward under FSDP meets the others' forward all-gather
    with its backward one. None where the calls before do not repeat or every rank left them."""
    ents: dict[int, dict[int, Entry]] = {}
    for r in pend:
        es = [e for e in inp.dumps[r].collectives(group) if not e.is_p2p and seq - _LOOK <= e.seq <= seq]
        ents[r] = {e.seq: e for e in es}
    lo = max((min(by) for by in ents.values() if by), default=seq)
    calls = {r: [_key(by[s]) if s in by else None for s in range(lo, seq + 1)] for r, by in ents.items()}
    got = judge.routine(calls)
    if got is None:
        return None
    first, left, _expected = got
    at = lo + first
    keep = next(r for r in sorted(ents) if r not in left)
    want = ents[keep].get(at)
    if want is None:
        return None
    want_f = user_frame(want)
    locs = [loc for r in left for loc in _loc(r, user_frame(ents[r][at]) if at in ents[r] else None, "diverged")]
    locs += [loc for r in left for loc in _loc(r, want_f, "skipped here")]
    locs += [loc for r in sorted(pend) if r not in left for loc in _loc(r, user_frame(pend[r]), "waiting")]
    return Finding(
        HANG_RANK_CONDITIONAL_COLLECTIVE,
        "error",
        f"{ranks_phrase(left)} left the routine of the earlier steps on group {group} at #{at}: every earlier "
        f"step, and the other ranks, made {want.op}{_at(want_f)} there; the calls parted at #{seq} "
        f"({'; '.join(f'rank {r}: {e.op}{_at(user_frame(e))}' for r, e in sorted(pend.items()))})",
        HINTS[HANG_RANK_CONDITIONAL_COLLECTIVE],
        tuple(sorted(pend)),
        tuple(locs),
        {
            "source": "flight recorder",
            "group": group,
            "seq": at,
            "attribution": {"how": "routine", "culprits": list(left)},
        },
        culprits=left,
    )


def _site(e: Entry) -> tuple[str, int] | None:
    """An entry's user line (file, line): its innermost frame in the user's code."""
    f = user_frame(e)
    return (f[0], f[1]) if f else None


def _guarded_finding(
    pend: dict[int, Entry], shapes: dict[int, tuple], extra: tuple[int, ...], test: RankTest, ev: dict
) -> Finding:
    """Ranks at one position in different calls, where ``extra``'s call is reached under a rank test (``test``,
    the first one's) and the others' is not: those ranks made a call the others never make (the dumps alone
    could not say which side; the source can)."""
    rest = [r for r in sorted(pend) if r not in extra]
    under = {r: next((f for f in user_frames(pend[r]) if f[:2] == (test.file, test.line)), None) for r in extra}
    e, frame = pend[extra[0]], under[extra[0]]
    waits = "; ".join(f"rank {r} waits in {_calls(shapes[r])} (#{pend[r].seq}){_at(user_frame(pend[r]))}" for r in rest)
    msg = (
        f"a collective is called on some ranks only: {ranks_phrase(extra)} "
        f"wait{'s' if len(extra) == 1 else ''} in {_calls(shapes[extra[0]])} (#{e.seq} of group {e.group})"
        f"{_at(frame)}, reached under the rank test at {os.path.basename(test.file)}:{test.test}, which "
        f"{ranks_phrase(rest)} {'does' if len(rest) == 1 else 'do'} not take; {waits}; diverged: {ranks_phrase(extra)}"
    )
    locs = [loc for r in extra for loc in _loc(r, under[r] or user_frame(pend[r]), "diverged")]
    locs += [loc for r in rest for loc in _loc(r, user_frame(pend[r]), "waiting")]
    return Finding(
        HANG_RANK_CONDITIONAL_COLLECTIVE,
        "error",
        msg,
        HINTS[HANG_RANK_CONDITIONAL_COLLECTIVE],
        tuple(sorted(pend)),
        tuple(locs),
        {**ev, "guard": [test.file, test.test]},
        culprits=extra,
    )


def _new_call(inp: Inputs, pend: dict[int, Entry], shapes: dict[int, tuple]) -> tuple[int, ...]:
    """The ranks whose pending call is one no rank made before, where every other rank's pending call is one
    every rank made before (the loop they all ran). Said, never blamed: those ranks left the loop early, or
    the others made an extra call before that completed against a regular one and shifted the sequence (rank
    1's extra all_reduce at step 2 leaves rank 1 in its last all_reduce and rank 0 in the final barrier, the
    same dumps as rank 0 out of batches). () when the evidence is not that plain."""
    hist = {
        r: {sig for key, sig in inp.dumps[r].signatures.items() if key != (e.group, e.seq)} for r, e in pend.items()
    }
    made = set().union(*hist.values())
    new = tuple(sorted(r for r in pend if shapes[r] not in made))
    old = [r for r in pend if r not in new]
    if new and old and all(shapes[o] in h for o in old for h in hist.values()):
        return new
    return ()


def _no_dump(
    inp: Inputs,
    stands: dict[int, Stand],
    missing: list[int],
    waiting: dict[int, Stand],
    severity: Severity,
    lost: dict[int, list[RankError]] | None = None,
) -> Finding:
    locs = [loc for r, s in sorted(waiting.items()) for loc in _loc(r, user_frame(s.pending), "waiting")]
    lost = lost or {}
    for r, es in sorted(lost.items()):
        locs += _loc(r, next((f for e in es if e.victim and (f := e.user_frame())), None), "victim")
    msg = f"{ranks_phrase(missing)} left no flight-recorder dump"
    suspects = missing
    if waiting:
        parts = "; ".join(
            f"rank {r} in {s.pending.call()} (#{s.pending.seq} of group {s.pending.group}){_at(user_frame(s.pending))}"
            for r, s in sorted(waiting.items())
            if s.pending
        )
        msg += (
            f" while every rank that dumped waits for {'it' if len(missing) == 1 else 'them'} ({parts}): "
            f"the first suspect is {ranks_phrase(missing)}, which most likely crashed or was killed"
        )
    elif lost:
        # a rank whose own log says it lost its peer is that peer's victim, dump or not: the suspects are the
        # ranks without a dump and without such an error
        suspects = [r for r in missing if r not in lost] or missing
        msg += (
            f" and {ranks_phrase(lost)} failed in a collective because a peer went away ('Connection closed "
            f"by peer'): the first suspect is {ranks_phrase(suspects)}, which most likely crashed or was killed"
        )
    else:
        msg += ": a rank that crashed or was killed writes none; the others show no collective pending"
    ev = {"source": "flight recorder", "missing": missing, "dumped": sorted(inp.dumps), "waiting": bool(waiting)}
    return Finding(
        POSTMORTEM_NO_DUMP,
        severity,
        msg,
        NO_DUMP_HINT,
        tuple(sorted(set(missing) | set(waiting) | set(lost))),
        tuple(locs),
        ev,
        culprits=tuple(suspects),
    )


def _alone(inp: Inputs, stands: dict[int, Stand]) -> Finding:
    """One rank's dump and nothing that names the job's other ranks: a distributed job has others, and they
    left no dump. Not OK: gloo marks a collective that failed because its peer died retired and counts it
    completed, so a survivor's dump reads exactly like a healthy one. Not a transport stall either where the
    rank waits: no other rank is seen inside that collective, so the others are the first suspects."""
    ((r, d),) = inp.dumps.items()
    pending = stands[r].pending if r in stands else None
    last = pending or d.last()
    head = f"only rank {r} left a flight-recorder dump and nothing names the job's other ranks (pg_config holds none)"
    if pending is not None:
        msg = (
            f"{head}; it waits in {pending.call()} (#{pending.seq} of group {pending.group}){_at(user_frame(pending))}: "
            "the ranks it waits for left no dump (crashed, killed, stuck outside any collective, or dumped "
            "elsewhere) and are the first suspects"
        )
    else:
        tail = (
            f"; its last collective, {last.call()} (#{last.seq} of group {last.group}){_at(user_frame(last))}, "
            if last
            else "; "
        )
        msg = (
            f"{head}{tail}reads as completed, which on gloo it also does when it failed because a peer died: "
            "the other ranks left no dump (crashed, killed, or dumped elsewhere)"
        )
    locs = _loc(r, user_frame(last), "waiting" if pending is not None else "last collective")
    return Finding(
        POSTMORTEM_NO_DUMP,
        "error",
        msg,
        NO_DUMP_HINT + " Give torchrun's log folder or the job's log with the dump: they name every rank.",
        (r,),
        tuple(locs),
        {"source": "flight recorder", "missing": "unknown", "dumped": [r], "waiting": pending is not None},
        culprits=(),
    )


def _holed_dumps(inp: Inputs) -> list[Finding]:
    """Ranks whose dump lacks entries it must hold (``Dump.holes``: a sequence id skipped, the call in flight
    absent): never OK for want of evidence, since the lost entry may be the divergence or the pending call.
    Asked last, so the holes never hide what the rest of the rings prove."""
    holed = {r: h for r, d in sorted(inp.dumps.items()) if (h := d.holes())}
    if not holed:
        return []
    said = "; ".join(f"rank {r}'s lacks {', '.join(h)}" for r, h in holed.items())
    ranks = tuple(holed)
    return [
        Finding(
            POSTMORTEM_NO_DUMP,
            "error",  # never OK for want of evidence
            f"{ranks_phrase(list(ranks))} left a flight-recorder dump with entries missing ({said}): what "
            f"{'it' if len(ranks) == 1 else 'they'} did there is unknown, and no other rank's dump shows a fault "
            "(a dump cut or edited after it was written, or a ring the watchdog wrote while the call was enqueued)",
            NO_DUMP_HINT,
            ranks,
            (),
            {"source": "flight recorder", "holes": {str(r): h for r, h in holed.items()}, "waiting": False},
            culprits=ranks,
        )
    ]


def _empty_dumps(inp: Inputs) -> list[Finding]:
    """Ranks whose dump holds no entry while other ranks recorded collectives, and nothing is pending: not
    silent, since what they did is unknown (their ring was off, they never reached a collective, or their
    watchdog wrote an empty ring, as a rank whose Python thread held the GIL did in NVRx's jobs)."""
    empty = sorted(r for r, d in inp.dumps.items() if not d.n_entries)
    full = [d for d in inp.dumps.values() if d.n_entries]
    if not empty or not full:
        return []
    most = max(d.n_entries for d in full)
    return [
        Finding(
            POSTMORTEM_NO_DUMP,
            "error",  # never OK for want of evidence
            f"{ranks_phrase(empty)} left an empty flight-recorder dump (0 entries) while the others recorded up to "
            f"{most} collectives and none is pending: what {'it' if len(empty) == 1 else 'they'} did is unknown "
            "(TORCH_FR_BUFFER_SIZE=0 there, no collective reached, or a watchdog that dumped an empty ring)",
            NO_DUMP_HINT,
            tuple(empty),
            (),
            {"source": "flight recorder", "empty": empty, "waiting": False},
            culprits=tuple(empty),
        )
    ]
