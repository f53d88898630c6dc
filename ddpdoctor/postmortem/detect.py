"""Findings from torch's own records of a job: flight-recorder dumps, torchrun error files and failure
summaries. The same ids, culprits and user lines as a live run, from what the dumps hold. Pure: no torch.

Where torch's ``fr_trace`` matches collectives by sequence id and reports the ranks missing from one,
this names the rank that made an extra call (its line is its own alone, or its group one the others
never used), and the rank that left no dump when the others wait for it.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import os
import signal
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ddpdoctor.analysis.findings import Finding, Location, RankLine, Severity, ranks_phrase
from ddpdoctor.analysis.hang import judge, programs
from ddpdoctor.analysis.hang.facts import ABSENT, Slot
from ddpdoctor.analysis.hang.hints import HINTS
from ddpdoctor.analysis.hang.paths import guard_in
from ddpdoctor.analysis.hang.sources.flight import (
    Stand,
    completed_anywhere,
    members,
    stand,
    used_groups,
    user_frame,
    user_frames,
)
from ddpdoctor.analysis.hang.sources.flight import descs as group_descs
from ddpdoctor.analysis.hang.sources.flight import facts as flight_facts
from ddpdoctor.analysis.hang.sources.flight import programs as dump_programs
from ddpdoctor.analysis.ids import (
    COLLECTIVE_SHAPE_MISMATCH,
    CRASH_ABNORMAL_EXIT,
    CRASH_EXCEPTION,
    HANG_DIVERGENT_COLLECTIVE,
    HANG_RANK_CONDITIONAL_COLLECTIVE,
    HANG_SHAPE_MISMATCH,
    HANG_TIMEOUT,
    HANG_TRANSPORT_STALL,
    POSTMORTEM_MIXED_DUMPS,
    POSTMORTEM_NO_DUMP,
)
from ddpdoctor.postmortem.errorfiles import RankError
from ddpdoctor.postmortem.flight import Dump, Entry, Kind, compared_outputs, compared_sizes, indices_of, take
from ddpdoctor.postmortem.inputs import Inputs

NO_DUMP_HINT = (
    "A rank that crashed or was killed (SIGKILL, the OOM killer, a node lost) writes no dump: read its own "
    "log and exit status first (torchrun's failure summary, `dmesg` for the OOM killer). Dump to a shared "
    "folder (TORCH_FR_DUMP_TEMP_FILE on persistent storage) so every rank's dump survives the job."
)
KILLED_HINT = (
    "The rank was ended by a signal and left neither a dump nor a traceback: look at why (SIGKILL: the OOM "
    "killer, `dmesg`, the scheduler's memory limit; SIGSEGV/SIGABRT: a native crash); the other ranks' "
    "errors ('Connection closed by peer') are consequences."
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
MIXED_HINT = (
    "Analyze the dumps of one attempt of one job together: clear the dump folder between runs, or put the "
    "job id in TORCH_FR_DUMP_TEMP_FILE."
)


def _loc(rank: int, frame: tuple[str, int, str] | None, role: str) -> list[Location]:
    return [Location(rank, frame[0], frame[1], frame[2], role)] if frame else []


def _at(frame: tuple[str, int, str] | None) -> str:
    return f" at {os.path.basename(frame[0])}:{frame[1]}" if frame else ""


def expected_ranks(inp: Inputs) -> tuple[set[int], bool]:
    """Every rank the records name, and whether the world size is known from something other than the
    dumps themselves (pg_config, torchrun's summary or log folder, error files)."""
    ranks = set(inp.dumps) | set(inp.blank)
    known = bool(inp.blank)  # an empty file named like the dumps names its rank
    for d in inp.dumps.values():
        for names in d.pg_ranks.values():
            ranks |= set(names)
            known = True
    for e in inp.summaries + inp.errors:
        if e.rank is not None:
            ranks.add(e.rank)
            known = True
    if inp.local_ranks:
        ranks |= inp.local_ranks[max(inp.local_ranks)]
        known = True
    return ranks, known


def _failures(inp: Inputs) -> dict[int, list[RankError]]:
    out: dict[int, list[RankError]] = {}
    for e in inp.errors + inp.summaries:
        if e.rank is not None:
            out.setdefault(e.rank, []).append(e)
    return out


def _signal_name(code: int | None) -> str:
    if code is None or code >= 0:
        return ""
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _own(e: RankError) -> bool:
    """A failure of the rank itself: an exception (a traceback) or a signal, not a lost peer."""
    return not e.victim and bool(
        e.frames or e.message.startswith("Signal") or (e.exitcode is not None and e.exitcode < 0)
    )


def _root_causes(fails: dict[int, list[RankError]]) -> list[tuple[int, RankError]]:
    """Ranks whose failure is their own (not a lost peer): an exception, or a signal."""
    out = []
    for r, es in sorted(fails.items()):
        own = [e for e in es if _own(e)]
        if own and not any(e.victim for e in es):
            # the error file's traceback first: it has the user's frames
            own.sort(key=lambda e: (not e.frames, e.path == ""))
            out.append((r, own[0]))
    # torchrun's agent ends the other ranks with SIGTERM once one failed, and its summary may name such a
    # rank as the first failure: a rank ended by SIGTERM is a root cause only when no other rank failed
    torn = torn_down(fails)
    real = [(r, e) for r, e in out if r not in torn and (e.frames or e.exitcode != -signal.SIGTERM)]
    return real or [(r, e) for r, e in out if r not in torn]


def _sigterm(e: RankError) -> bool:
    return not e.frames and e.exitcode == -signal.SIGTERM


def torn_down(fails: dict[int, list[RankError]]) -> set[int]:
    """The ranks torchrun's agent ended (SIGTERM, no traceback) because another rank had exited first: a rank
    that failed otherwise (a non-zero exit of its own: a watchdog's abort, an exception) is torchrun's first
    observed failure, and the SIGTERM that followed is the teardown of the rest, never a root cause. A rank
    SIGTERM'd where no other rank failed otherwise (the scheduler ended the job) is not one."""
    first = {r for r, es in fails.items() if any(e.exitcode not in (None, 0) and not _sigterm(e) for e in es)}
    first |= {r for r, es in fails.items() if any(e.frames and not e.victim for e in es)}
    return {r for r, es in fails.items() if r not in first and es and all(_sigterm(e) for e in es)} if first else set()


def findings(inp: Inputs) -> tuple[list[Finding], list[RankLine], list[str]]:
    """The findings, one line per rank, and the notes (what the records cannot tell)."""
    world, known = expected_ranks(inp)
    done = completed_anywhere(list(inp.dumps.values()))
    stands = {r: stand(d, done) for r, d in sorted(inp.dumps.items())}
    missing = sorted(world - set(inp.dumps))
    fails = _failures(inp)
    notes = _notes(inp, known, missing, done)
    out: list[Finding] = []
    roots = _root_causes(fails)
    if roots:
        out += _crash(inp, stands, fails, roots, missing)
    else:
        stuck = {r: s for r, s in stands.items() if s.pending is not None}
        if not known and len(inp.dumps) == 1:
            # one dump and nothing that names the others: "every rank waits" would be this rank alone
            out.append(_alone(inp, stands))
        elif stuck:
            out += _hang(inp, stands, stuck, world, missing)
        elif missing and known:
            # never OK for want of evidence: what a rank without a dump did is unknown
            lost = {r: es for r, es in fails.items() if any(e.victim for e in es)}
            out.append(_no_dump(inp, stands, missing, waiting={}, severity="error", lost=lost))
        else:
            out += _empty_dumps(inp)
    mixed = _mixed(inp)
    if not mixed:
        out += _completed_mismatch(inp)
    out += mixed
    return out, _rank_lines(inp, stands, world, fails), notes


def _crash(
    inp: Inputs,
    stands: dict[int, Stand],
    fails: dict[int, list[RankError]],
    roots: list[tuple[int, RankError]],
    missing: list[int],
) -> list[Finding]:
    rank, err = roots[0]
    culprits = tuple(r for r, _ in roots)
    victims = sorted((set(stands) | set(fails)) - set(culprits))
    locs: list[Location] = []
    for r, e in roots:
        locs += _loc(r, e.user_frame(), "raised")
    for v in victims:
        ve = next((e for e in fails.get(v, ()) if e.victim and e.user_frame()), None)
        frame = ve.user_frame() if ve else None
        if frame is None and v in stands:
            s = stands[v]
            frame = user_frame(s.pending or s.last)
        locs += _loc(v, frame, "victim")
    nodump = [r for r in culprits if r in missing]
    tail = ""
    if victims:
        tail = f"; {ranks_phrase(victims)} {'was' if len(victims) == 1 else 'were'} waiting on it"
        # where each victim waited: its pending call, else its last one (gloo marks a call that failed when
        # its peer died as completed: a size mismatch's abort leaves the survivor's call there)
        said = []
        for v in victims:
            st = stands.get(v)
            call = (st.pending or st.last) if st else None
            if st is not None and call is not None:
                how = "in" if st.pending else "last called"
                said.append(f"rank {v} {how} {call.call()} #{call.seq} of group {call.group}{_at(user_frame(call))}")
        if said:
            tail += f" ({'; '.join(said)})"
    if nodump:
        tail += f"; {ranks_phrase(nodump)} left no flight-recorder dump (a rank that dies writes none)"
    ev = {
        "source": "torchrun error files / failure summary",
        "root_causes": {str(r): {"message": e.message, "exitcode": e.exitcode, "error_file": e.path} for r, e in roots},
    }
    if err.message.startswith("Fatal Python error"):
        # a native crash faulthandler printed: its stack has the line (gloo aborts the rank whose buffer is
        # the smaller one on a size mismatch: "Received data size doesn't match expected size")
        uf = err.user_frame()
        msg = (
            f"rank {rank} aborted ({_signal_name(err.exitcode) or 'a native crash'}, exit code {err.exitcode})"
            f"{_at(uf)}: {err.message[:300]}{tail}"
        )
        if "size doesn't match" in err.message or "collective mismatch" in err.message:
            msg += "; the ranks passed different sizes to one collective (gloo aborts the rank with the smaller one)"
        return [
            Finding(
                CRASH_ABNORMAL_EXIT,
                "error",
                msg,
                KILLED_HINT,
                tuple(sorted(set(culprits) | set(victims))),
                tuple(locs),
                ev,
                culprits=culprits,
            )
        ]
    sig = _signal_name(err.exitcode) if not err.frames else ""
    if sig or (not err.frames and err.message.startswith("Signal")):
        last = _last_seen(inp, rank)
        msg = (
            f"rank {rank} was killed by {sig or err.message} (exit code {err.exitcode}) and left no traceback"
            f"{last}{tail}"
        )
        return [
            Finding(
                CRASH_ABNORMAL_EXIT,
                "error",
                msg,
                KILLED_HINT,
                tuple(sorted(set(culprits) | set(victims))),
                tuple(locs),
                ev,
                culprits=culprits,
            )
        ]
    first = err.message.strip().splitlines()[0] if err.message.strip() else "an exception"
    msg = f"rank {rank} raised {first[:200]}{tail}"
    hint = (
        "Fix the exception on the rank that raised first; the other ranks' errors ('Connection closed by "
        "peer', timeouts) are consequences."
    )
    return [
        Finding(
            CRASH_EXCEPTION,
            "error",
            msg,
            hint,
            tuple(sorted(set(culprits) | set(victims))),
            tuple(locs),
            ev,
            culprits=culprits,
        )
    ]


def _last_seen(inp: Inputs, rank: int) -> str:
    """What the other ranks' dumps prove about a rank that left none: the last collective it completed."""
    best: tuple[int, str] | None = None
    for d in inp.dumps.values():
        for pg_id, st in d.pg_status.items():
            group = d.group_of(pg_id)
            if group == "0" and st.last_completed > 0 and (best is None or st.last_completed > best[0]):
                best = (st.last_completed, group)
    if best is None:
        return ""
    if any(d.op_units for d in inp.dumps.values()):
        # gloo counts the collective that failed when this rank died as completed on the survivors
        return (
            f"; it took part in group {best[1]}'s collectives up to #{best[0] - 1} at least (#{best[0]}, which "
            "the others count as completed, may be the one that failed when it died)"
        )
    return f"; it took part in group {best[1]}'s collectives up to #{best[0]} (the others completed them)"


def _hang(
    inp: Inputs, stands: dict[int, Stand], stuck: dict[int, Stand], world: set[int], missing: list[int]
) -> list[Finding]:
    groups: dict[str, set[int]] = {}

    def group_members(g: str) -> set[int]:
        if g not in groups:
            groups[g] = members(inp, g, world)
        return groups[g]

    waits, unknown = judge.waits_graph(flight_facts(inp, stands, missing), group_members)
    unmet = {r: waits.get(r, set()) for r in stuck}
    torn = torn_down(_failures(inp)) & set(missing)
    if torn:
        first = _first_call_stranded(inp, stuck, torn)
        if first is not None:
            return [_unseen(first, sorted(set(missing) - torn))]
    if missing and all(u <= set(missing) for u in unmet.values()):
        return [_no_dump(inp, stands, missing, stuck, "error")]
    # Ranks wait for ranks that wait for others in turn (pipeline, tensor and expert groups): follow who
    # waits for whom from every waiting rank. The ranks at the ends of those chains wait for nobody: a rank
    # that dumped with nothing pending (an empty dump too: the most common hang, one rank in compute or
    # its data loader while the others wait), one that left no dump, or one inside an op its peers issued
    # too that does not complete (a GPU or NCCL fault there). Those are the first suspects.
    roots = judge.chain_ends(unmet, unknown)
    # a waiting rank whose calls are the idle rank's with one more in between: not the idle rank behind,
    # but an extra call that completed against another one and shifted every call after it
    inserted = _inserted(inp, stuck, [r for r in roots if r not in stuck])
    if inserted is not None:
        return [_unseen(inserted, missing)]
    # a rank behind (nothing pending, an empty or no dump) is the strongest evidence; a rank inside an op
    # its peers issued too is one only where no rank's pending call is an extra one
    if roots and (any(p not in stuck for p in roots) or not _extra(inp, stuck)):
        return [_unseen(_behind(inp, stuck, roots, missing, unmet), missing)]
    program = _program(inp, stuck)
    if program is not None:
        # every group's own sequence agrees or shows a rank behind, and the waits are a cycle across groups:
        # the ranks' orders name the rank that made one call more or fewer (a device mesh's tp and dp)
        return [_unseen(program, missing)]
    keys = {r: (s.pending.group, s.pending.seq) for r, s in stuck.items() if s.pending}
    if len(set(keys.values())) > 1 or any(unmet.values()):
        return [_unseen(_divergence(inp, stuck, keys, unmet), missing)]
    return [_unseen(_same_collective(inp, stuck, world), missing)]


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
    """What two ranks' calls at one position share when they are the same call: op, shapes, user line."""
    f = user_frame(e)
    return (e.op, compared_sizes(e.op, e.input_sizes), f[:2] if f else None)


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
        return (e.group, e.op, compared_sizes(e.op, e.input_sizes), e.dtypes)

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
    return d.signature_at(e.group, e.seq) or (
        (e.op, compared_sizes(e.op, e.input_sizes), e.dtypes, compared_outputs(e.op, e.output_sizes, e.out_dtypes)),
    )


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


def _same_collective(inp: Inputs, stuck: dict[int, Stand], world: set[int]) -> Finding:
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
        guarded = {} if rare else _guarded(pend, len(world))
        if guarded and len(guarded) < len(pend):
            return _guarded_finding(pend, shapes, guarded, ev)
        if not rare:
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


def _guarded(pend: dict[int, Entry], world: int) -> dict[int, tuple[tuple[str, int, str], str, int]]:
    """The ranks whose pending call is reached under a rank test (``if rank == 1:`` around the call, or
    around a caller on its stack), read from the source files the dumps' stacks name where they are readable
    (the ledger's and the stacks' judgements use the same reading, analysis/hang/paths.py): each with the frame
    under the test and the test's file and line. A test that excludes the rank itself (the file changed since
    the job ran) is not taken."""
    out = {}
    for r, e in pend.items():
        frames = user_frames(e)
        g = guard_in([f[:2] for f in frames], world)
        if g is None:
            continue
        path, line, test, who = g
        if who is not None and r not in who:
            continue
        out[r] = (next(f for f in frames if f[:2] == (path, line)), path, test)
    return out


def _guarded_finding(
    pend: dict[int, Entry],
    shapes: dict[int, tuple],
    guarded: dict[int, tuple[tuple[str, int, str], str, int]],
    ev: dict,
) -> Finding:
    """Ranks at one position in different calls, where some ranks' call is reached under a rank test and
    the others' is not: those ranks made a call the others never make (the dumps alone could not say which
    side; the source can)."""
    extra = sorted(guarded)
    rest = [r for r in sorted(pend) if r not in guarded]
    e, (frame, path, test) = pend[extra[0]], guarded[extra[0]]
    waits = "; ".join(f"rank {r} waits in {_calls(shapes[r])} (#{pend[r].seq}){_at(user_frame(pend[r]))}" for r in rest)
    msg = (
        f"a collective is called on some ranks only: {ranks_phrase(extra)} "
        f"wait{'s' if len(extra) == 1 else ''} in {_calls(shapes[extra[0]])} (#{e.seq} of group {e.group})"
        f"{_at(frame)}, reached under the rank test at {os.path.basename(path)}:{test}, which "
        f"{ranks_phrase(rest)} {'does' if len(rest) == 1 else 'do'} not take; {waits}; diverged: {ranks_phrase(extra)}"
    )
    locs = [loc for r in extra for loc in _loc(r, guarded[r][0], "diverged")]
    locs += [loc for r in rest for loc in _loc(r, user_frame(pend[r]), "waiting")]
    return Finding(
        HANG_RANK_CONDITIONAL_COLLECTIVE,
        "error",
        msg,
        HINTS[HANG_RANK_CONDITIONAL_COLLECTIVE],
        tuple(sorted(pend)),
        tuple(locs),
        {**ev, "guard": [path, test]},
        culprits=tuple(extra),
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


CLOCK_SLACK_MS = 5_000  # clocks of two nodes may differ by this much; one host's ranks share one clock
UNKNOWN_TIMEOUT_MS = 30 * 60_000  # a collective's timeout where none is recorded: gloo's default, the longest


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


def _mixed(inp: Inputs) -> list[Finding]:
    """The same collective (group, seq), completed on two ranks, created further apart than its timeout:
    the dumps cannot come from one attempt of one job (the rank that came first would have timed out
    waiting). Only completed collectives count: a pending one may meet a late rank after its timeout."""
    apart: set[tuple[int, int]] = set()
    dumps = sorted(inp.dumps.items())
    # No two creation times of one collective closer than every timeout in play (and no negative timeout):
    # no pair can be too far apart, and a rank's positions are checked at once (C speed) against this floor.
    outs = [k.timeout_ms for _, d in dumps for k in d.kinds]
    floor = None
    if all(t >= 0 for t in outs):
        least = min(min((t for t in outs if t > 0), default=UNKNOWN_TIMEOUT_MS), UNKNOWN_TIMEOUT_MS)
        floor = (least + CLOCK_SLACK_MS) * 1_000_000
    # per group, per sequence id: the first rank that completed it, its creation time and timeout
    first_t: dict[str, dict[int, int]] = {}
    first_r: dict[str, dict[int, int]] = {}
    first_to: dict[str, dict[int, int]] = {}
    for r, d in dumps:
        tmo = [k.timeout_ms for k in d.kinds]
        for g, idx in d.done_index.items():
            seqs, times, kinds = take(d.seq, idx), take(d.tns, idx), take(d.kind, idx)
            if 0 in times:  # no creation time recorded: not compared
                keep = [j for j, t in enumerate(times) if t]
                seqs, times, kinds = [seqs[j] for j in keep], [times[j] for j in keep], [kinds[j] for j in keep]
            ft, fr, fto = first_t.setdefault(g, {}), first_r.setdefault(g, {}), first_to.setdefault(g, {})
            t0s = list(map(ft.get, seqs))
            new = indices_of(t0s, None)
            if floor is not None and times:
                cmp = t0s
                if new:
                    cmp = list(t0s)
                    for j in new:
                        cmp[j] = times[j]
                quick = max(map(abs, map(operator.sub, times, cmp))) <= floor
            else:
                quick = not times
            if quick:
                for j in new:
                    q = seqs[j]
                    if q not in ft:
                        ft[q], fr[q], fto[q] = times[j], r, tmo[kinds[j]]
                continue
            for q, t, k, t0 in zip(seqs, times, kinds, t0s):
                if t0 is None:
                    if q not in ft:  # else this rank's own earlier entry of it: not compared with itself
                        ft[q], fr[q], fto[q] = t, r, tmo[k]
                    continue
                timeout_ms = max(fto[q], tmo[k]) or UNKNOWN_TIMEOUT_MS  # unknown: gloo's default, the longest
                if fr[q] != r and abs(t - t0) > (timeout_ms + CLOCK_SLACK_MS) * 1_000_000:
                    apart.add((fr[q], r))
    if not apart:
        return []
    pairs = sorted(apart)
    ranks = sorted({x for p in pairs for x in p})
    return [
        Finding(
            POSTMORTEM_MIXED_DUMPS,
            "warning",
            f"the dumps of {ranks_phrase(ranks)} come from different attempts or jobs: the same "
            f"collectives completed although they were created further apart than their timeout (e.g. ranks "
            f"{pairs[0][0]} and {pairs[0][1]}); the findings compare records that never met",
            MIXED_HINT,
            tuple(ranks),
            (),
            {"pairs": [list(p) for p in pairs]},
        )
    ]


def _completed_mismatch(inp: Inputs) -> list[Finding]:
    """The first collective every rank that recorded it completed with different shapes or dtypes
    (gloo lets equal byte counts through; NCCL checks nothing): the job went on with wrong results."""
    from ddpdoctor.analysis.hang.collective import HINT, MUST_AGREE

    # NCCL's own names of the same calls, as profiling_name carries them
    must = MUST_AGREE | {
        "_broadcast_oop",
        "_reduce_oop",
        "allreduce_coalesced",
        "_all_gather_base",
        "_allgather_base",
        "all_gather_into_tensor_coalesced",
        "_reduce_scatter_base",
        "reduce_scatter",
        "reduce_scatter_tensor_coalesced",
    }
    # Most jobs agree everywhere. Per group, each rank's completed positions (sequence id -> the id of its
    # signature) are checked against the lowest rank's as one dict (C speed); a position where some rank
    # differs is odd, and only odd positions are looked at entry by entry for the finding.
    sig_ids: dict[tuple, int] = {}
    ref: dict[str, dict[int, int]] = {}
    odd_keys: set[tuple[str, int]] = set()
    for r in sorted(inp.dumps):
        d = inp.dumps[r]
        # per kind: the id of the signature of a position holding that one entry; None: not a must-agree op
        ksig = [
            sig_ids.setdefault(
                ((k.op, k.input_sizes, k.dtypes, compared_outputs(k.op, k.output_sizes, k.out_dtypes)),)
                if not k.op.endswith("coalesced")
                else (),
                len(sig_ids),
            )
            if k.op in must
            else None
            for k in d.kinds
        ]
        for g, idx in d.done_index.items():
            seqs, kinds = take(d.seq, idx), take(d.kind, idx)
            every = d.group_seqs(g)
            if len(set(every)) != len(every):  # a coalesced group: several entries share a sequence id
                m: dict[int, int | None] = {}
                for q, k in zip(seqs, kinds):
                    if ksig[k] is not None and q not in m:
                        m[q] = sig_ids.setdefault(d.signature_at(g, q), len(sig_ids))
            elif None in ksig:
                m = {q: ksig[k] for q, k in zip(seqs, kinds) if ksig[k] is not None}
            else:
                m = dict(zip(seqs, map(ksig.__getitem__, kinds)))
            rg = ref.setdefault(g, {})
            if m.items() <= rg.items():
                continue
            for q, v in m.items():
                if rg.setdefault(q, v) != v:  # type: ignore[arg-type]
                    odd_keys.add((g, q))
    shut: dict[int, set[int]] = {}
    firsts: dict[tuple[int, tuple[str, int]], tuple[tuple, Entry]] = {}

    def slot_at(r: int, key: tuple[str, int]) -> Slot:
        """The rank's first entry at the position that it completed with a must-agree op, as a slot whose
        key is the signature of every entry there (a coalesced group's included)."""
        d = inp.dumps[r]
        if r not in shut:
            shut[r] = set(d.open_index)
        first = next((i for i in d.positions(*key) if d.kinds[d.kind[i]].op in must and i not in shut[r]), None)
        if first is None:
            return Slot(ABSENT)
        e, sig = d.entry(first), d.signature_at(*key)
        firsts[(r, key)] = (sig, e)
        return Slot("+".join(x[0] for x in sig), _site(e), agree=sig)

    # the odd positions in order, each looked at entry by entry only when the ones before it found nothing;
    # completed calls are compared among the ranks that recorded them (each member joined them: a rank
    # without one lost its record, it was not behind), and only a shape question (the same calls) counts
    odd_positions = sorted(odd_keys, key=lambda k: (k[1], k[0]))
    for part in judge.partings(sorted(inp.dumps), odd_positions, slot_at, partial=True):
        if part.kind != "shape-mismatch":
            continue  # different calls: not a shape question
        key, odd = part.pos, part.odd
        per = {r: firsts[(r, key)] for r in part.slots}
        sigs = {r: sig for r, (sig, _) in per.items()}
        parts = "; ".join(
            f"rank {r}: {_calls(sigs[r])} {'/'.join(dict.fromkeys(t for x in sigs[r] for t in x[2]))}"
            f"{_at(user_frame(per[r][1]))}"
            for r in sorted(per)
        )
        locs = [loc for r in sorted(per) for loc in _loc(r, user_frame(per[r][1]), "mismatched" if r in odd else "")]
        return [
            Finding(
                COLLECTIVE_SHAPE_MISMATCH,
                "error",
                f"ranks passed different shapes or dtypes to {per[min(per)][1].op} #{key[1]} of group {key[0]} "
                f"and it completed: {parts}; the result is wrong",
                HINT,
                tuple(sorted(per)),
                tuple(locs),
                {"source": "flight recorder", "group": key[0], "seq": key[1]},
                culprits=odd if len(odd) < len(per) else tuple(sorted(per)),
            )
        ]
    return []


def _lagged(dumps: list[Dump], done: dict[str, int]) -> list[tuple[int, Entry]]:
    """Per rank, its oldest collective its own records leave open that another rank completed (``done``:
    per group, the highest sequence id any rank completed)."""
    out = []
    for d in dumps:
        for i in d.open_index:
            k = d.kinds[d.kind[i]]
            if not k.is_p2p and d.seq[i] <= done.get(k.group, -1):
                out.append((d.rank, d.entry(i)))
                break
    return sorted(out, key=lambda x: x[0])


def job_tag(k: int, inp: Inputs) -> str:
    """``job 2 (jobb_rank_0.., 07:56:10)``: one of several jobs' dumps, by its files and its first call's time."""
    from ddpdoctor.postmortem.inputs import span

    ds = sorted(inp.dumps.values(), key=lambda d: d.rank)
    first = min((sp[0] for d in ds if (sp := span(d))), default=0)
    when = time.strftime("%H:%M:%S", time.localtime(first / 1e9)) if first else "?"
    return f"job {k} ({os.path.basename(ds[0].path) if ds else '?'}.., from {when})"


def several_jobs(parts: Sequence[Inputs]) -> str:
    """The note that the dumps come from several jobs, how far apart, judged each on its own."""
    from ddpdoctor.postmortem.inputs import span

    starts = [min((sp[0] for d in p.dumps.values() if (sp := span(d))), default=0) for p in parts]
    gaps = ", ".join(f"{(b - a) / 1e9:.0f} s" for a, b in zip(starts, starts[1:]))
    return (
        f"the dumps come from {len(parts)} jobs (or attempts), their calls {gaps} apart: each is judged on its own "
        "dumps, never one job's over another's"
    )


def _notes(inp: Inputs, known: bool, missing: list[int], done: dict[str, int]) -> list[str]:
    notes = list(inp.notes)
    dumps = list(inp.dumps.values())
    same = sorted(r for r, _keep, _drop, ok in inp.duplicates if ok)
    if same:
        notes.append(
            f"{ranks_phrase(same)}: a pickle and a JSON dump of the same records; read the pickle (it has the stacks)"
        )
    for r, keep, drop, ok in inp.duplicates:
        if not ok:
            notes.append(
                f"rank {r}: two dumps that differ ({keep}, {drop}): from different attempts or jobs? read {keep}"
            )
    if dumps:
        notes.append(
            "from torch's flight recorder: "
            + ", ".join(f"rank {d.rank} ({d.fmt} v{d.version}, {d.n_entries} entries)" for d in dumps[:8])
            + (f", and {len(dumps) - 8} more" if len(dumps) > 8 else "")
        )
    if not known and dumps:
        notes.append(
            f"the dumps do not say how many ranks the job had (their pg_config names no ranks: gloo writes the "
            "world's ranks there until the job creates a second group, which overwrites them with []): ranks above "
            f"{max(inp.dumps)} that left no dump cannot be seen; give torchrun's log folder or the job's "
            "log too"
        )
    for r, path in sorted(inp.blank.items()):
        notes.append(f"rank {r}: {path} is empty (0 bytes): counted as a rank that left no dump")
    lag = _lagged(dumps, done)
    if lag:
        r, e = lag[0]
        more = f" (and {len(lag) - 1} more rank{'s' if len(lag) > 2 else ''})" if len(lag) > 1 else ""
        notes.append(
            f"rank {r}'s records leave {e.call()} (#{e.seq} of group {e.group}) not completed{more}, while another "
            "rank completed it: a collective completes only once every member joined it, so these records lagged "
            "(torch's analyzer calls this a state mismatch); read as completed"
        )
    nostack = sorted(d.rank for d in dumps if not d.stacks and d.n_entries)
    if nostack:
        notes.append(
            f"{ranks_phrase(nostack)}: the dump holds no Python stacks (JSON dumps never do; pickle "
            "dumps with includeStackTraces=False neither): no user lines for these ranks"
        )
    cut = {d.rank: d.rid[0] for d in dumps if d.n_entries and d.rid[0] > 0}
    if cut:
        # one line for all ranks (a 16-rank job said it 16 times), and a buffer size only where every cut
        # ring holds as many entries: rings of 8 to 43 entries were trimmed dumps, not a small buffer
        sizes = {inp.dumps[r].n_entries for r in cut}
        size = f" (TORCH_FR_BUFFER_SIZE is {sizes.pop()} or so)" if len(sizes) == 1 else ""
        r0 = min(cut, key=lambda r: cut[r])
        notes.append(
            f"{ranks_phrase(cut)}: the ring dropped {cut[r0]} older entries (rank {r0}; the others as many or "
            f"more){size}: a divergence before record {cut[r0]} cannot be seen; the counts in pg_status still tell "
            "how far each rank got"
        )
    versions = {d.version for d in dumps}
    if len(versions) > 1:
        notes.append(
            f"the dumps have different format versions ({', '.join(sorted(versions))}): different torch "
            "builds, maybe different jobs"
        )
    attempts = {e.attempt for e in inp.errors if e.attempt is not None} | set(inp.local_ranks)
    if len(attempts) > 1:
        notes.append(
            f"torchrun's log folder has {len(attempts)} attempts ({', '.join(map(str, sorted(attempts)))}): "
            "the error files of the last one are the ones that match the dumps"
        )
    if dumps:
        notes.append(
            "what the dumps cannot tell: what a rank did after its last collective (compute, I/O, a "
            "Python loop), whether a failed collective failed or completed (gloo marks both completed), "
            "and where a rank without a dump was"
        )
    return notes


def _rank_lines(
    inp: Inputs, stands: dict[int, Stand], world: set[int], fails: dict[int, list[RankError]]
) -> list[RankLine]:
    out = []
    torn = torn_down(fails)
    for r in sorted(world | set(stands) | set(fails)):
        s = stands.get(r)
        own = [e for e in fails.get(r, ()) if _own(e)]
        if own and not any(e.victim for e in fails.get(r, ())):
            e = own[0]
            sig = _signal_name(e.exitcode) if not e.frames else ""
            uf = e.user_frame()
            killed = f"killed by {sig}" + (" (torchrun's teardown, after another rank exited)" if r in torn else "")
            out.append(
                RankLine(
                    r,
                    "killed" if sig else "crashed",
                    killed if sig else e.message[:120],
                    Location(r, uf[0], uf[1], uf[2]) if uf else None,
                )
            )
        elif s is not None and s.pending is not None:
            p = s.pending
            uf = user_frame(p)
            out.append(
                RankLine(
                    r,
                    "waiting",
                    f"waiting in {p.call()} (#{p.seq} of group {p.group})",
                    Location(r, uf[0], uf[1], uf[2]) if uf else None,
                )
            )
        elif s is not None:
            last = s.last
            detail = (
                f"no collective pending; last {last.call()} (#{last.seq} of group {last.group})"
                if last
                else "left an empty flight-recorder dump (0 entries)"
            )
            if any(e.victim for e in fails.get(r, ())):
                detail += "; its collective failed when a peer went away"
            uf = user_frame(last)
            out.append(RankLine(r, "busy", detail, Location(r, uf[0], uf[1], uf[2]) if uf else None))
        else:
            out.append(RankLine(r, "unresponsive", "left no flight-recorder dump"))
    return out
