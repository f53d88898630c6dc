"""Findings from torch's own records of a job: flight-recorder dumps, torchrun error files and failure
summaries. The same ids, culprits and user lines as a live run, from what the dumps hold. Pure: no torch.

Where torch's ``fr_trace`` matches collectives by sequence id and reports the ranks missing from one,
this names the rank that made an extra call (its line is its own alone, or its group one the others
never used), and the rank that left no dump when the others wait for it.
"""

from __future__ import annotations

import signal
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ddpdoctor.analysis.findings import Finding, Location, RankLine, Severity, ranks_phrase
from ddpdoctor.analysis.hang.hints import HINTS
from ddpdoctor.postmortem.errorfiles import RankError
from ddpdoctor.postmortem.flight import Dump, Entry
from ddpdoctor.postmortem.inputs import Inputs
from ddpdoctor.record.paths import LIB_MARKERS, is_user_path

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
MIXED_HINT = (
    "Analyze the dumps of one attempt of one job together: clear the dump folder between runs, or put the "
    "job id in TORCH_FR_DUMP_TEMP_FILE."
)


@dataclass(frozen=True)
class Stand:
    """Where one rank that left a dump stands: its oldest collective not completed, and its last one."""

    rank: int
    pending: Entry | None
    last: Entry | None


def user_frame(e: Entry | None) -> tuple[str, int, str] | None:
    """The innermost frame of the user's code in an entry's stack (torch records innermost first)."""
    for f in e.frames if e else ():
        if is_user_path(f.file, lib_markers=LIB_MARKERS):
            return f.file, f.line, f.func
    return None


def _loc(rank: int, frame: tuple[str, int, str] | None, role: str) -> list[Location]:
    return [Location(rank, frame[0], frame[1], frame[2], role)] if frame else []


def _at(frame: tuple[str, int, str] | None) -> str:
    import os

    return f" at {os.path.basename(frame[0])}:{frame[1]}" if frame else ""


def _completed(d: Dump, e: Entry, done: dict[str, int] | None = None) -> bool:
    if done and not e.is_p2p and e.seq <= done.get(e.group, -1):
        # another rank completed it: a collective completes on one rank only once every rank joined, so
        # this rank's own bookkeeping merely lagged (gloo marks the work done after wait() has returned)
        return True
    st = d.pg_status.get(e.pg_id)
    if e.is_p2p or st is None:
        # gloo never moves an entry's state past "scheduled"; retired = no longer watched
        return e.state == "completed" or e.retired
    return e.seq <= st.last_completed


def completed_anywhere(dumps: list[Dump]) -> dict[str, int]:
    """Per group, the highest sequence id any rank completed."""
    done: dict[str, int] = {}
    for d in dumps:
        for pg_id, st in d.pg_status.items():
            g = d.group_of(pg_id)
            done[g] = max(done.get(g, -1), st.last_completed)
    return done


def stand(d: Dump, done: dict[str, int] | None = None) -> Stand:
    """The rank's oldest pending collective (the one it blocks in) and its newest entry; ``done`` (per
    group, the highest sequence id any rank completed) clears collectives other ranks saw complete."""
    pend = [e for e in d.entries if not _completed(d, e, done)]
    return Stand(d.rank, min(pend, key=lambda e: e.record_id) if pend else None, d.entries[-1] if d.entries else None)


def enqueued(d: Dump, group: str) -> int:
    """The last sequence id the rank enqueued on ``group`` (pg_status, else its entries); 0 for none."""
    best = max((e.seq for e in d.entries if e.group == group and not e.is_p2p), default=0)
    for pg_id, st in d.pg_status.items():
        if d.group_of(pg_id) == group:
            best = max(best, st.last_enqueued)
    return best


def used_groups(d: Dump) -> set[str]:
    """Groups the rank issued a collective on (in its ring or its pg_status)."""
    return {e.group for e in d.entries} | {d.group_of(p) for p, st in d.pg_status.items() if st.last_enqueued > 0}


def expected_ranks(inp: Inputs) -> tuple[set[int], bool]:
    """Every rank the records name, and whether the world size is known from something other than the
    dumps themselves (pg_config, torchrun's summary or log folder, error files)."""
    ranks = set(inp.dumps)
    known = False
    for d in inp.dumps.values():
        for members in d.pg_ranks.values():
            ranks |= set(members)
            known = True
    for e in inp.summaries + inp.errors:
        if e.rank is not None:
            ranks.add(e.rank)
            known = True
    if inp.local_ranks:
        ranks |= inp.local_ranks[max(inp.local_ranks)]
        known = True
    return ranks, known


def members(inp: Inputs, group: str, world: set[int]) -> set[int]:
    """The ranks of ``group``: pg_config where the dumps name them (NCCL), else the ranks whose dumps
    use it, and every rank for the default group ("0")."""
    for d in inp.dumps.values():
        if group in d.pg_ranks:
            return set(d.pg_ranks[group])
    if group == "0":
        return set(world)
    return {r for r, d in inp.dumps.items() if group in used_groups(d)} | {
        r for r, d in inp.dumps.items() if any(d.group_of(p) == group for p in d.pg_status)
    }


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
    return out


def findings(inp: Inputs) -> tuple[list[Finding], list[RankLine], list[str]]:
    """The findings, one line per rank, and the notes (what the records cannot tell)."""
    world, known = expected_ranks(inp)
    done = completed_anywhere(list(inp.dumps.values()))
    stands = {r: stand(d, done) for r, d in sorted(inp.dumps.items())}
    missing = sorted(world - set(inp.dumps))
    fails = _failures(inp)
    notes = _notes(inp, known, missing)
    out: list[Finding] = []
    roots = _root_causes(fails)
    if roots:
        out += _crash(inp, stands, fails, roots, missing)
    else:
        stuck = {r: s for r, s in stands.items() if s.pending is not None}
        if stuck:
            out += _hang(inp, stands, stuck, world, missing)
        elif missing and known:
            lost = {r: es for r, es in fails.items() if any(e.victim for e in es)}
            out.append(_no_dump(inp, stands, missing, waiting={}, severity="error" if lost else "warning", lost=lost))
    out += _mixed(inp)
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
    if nodump:
        tail += f"; {ranks_phrase(nodump)} left no flight-recorder dump (a rank that dies writes none)"
    ev = {
        "source": "torchrun error files / failure summary",
        "root_causes": {str(r): {"message": e.message, "exitcode": e.exitcode, "error_file": e.path} for r, e in roots},
    }
    sig = _signal_name(err.exitcode) if not err.frames else ""
    if sig or (not err.frames and err.message.startswith("Signal")):
        last = _last_seen(inp, rank)
        msg = (
            f"rank {rank} was killed by {sig or err.message} (exit code {err.exitcode}) and left no traceback"
            f"{last}{tail}"
        )
        return [
            Finding(
                "crash.abnormal-exit",
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
            "crash.exception",
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
    return f"; it took part in group {best[1]}'s collectives up to #{best[0]} (the others completed them)"


def _hang(
    inp: Inputs, stands: dict[int, Stand], stuck: dict[int, Stand], world: set[int], missing: list[int]
) -> list[Finding]:
    unmet: dict[int, set[int]] = {}
    for r, s in stuck.items():
        e = s.pending
        assert e is not None
        mem = members(inp, e.group, world) - {r}
        unmet[r] = {p for p in mem if p in missing or enqueued(inp.dumps[p], e.group) < e.seq}
    if missing and all(u <= set(missing) for u in unmet.values()):
        return [_no_dump(inp, stands, missing, stuck, "error")]
    keys = {r: (s.pending.group, s.pending.seq) for r, s in stuck.items() if s.pending}
    if len(set(keys.values())) > 1 or any(unmet.values()):
        return [_divergence(inp, stuck, keys, unmet)]
    return [_same_collective(stuck)]


def _extra(inp: Inputs, stuck: dict[int, Stand]) -> list[int]:
    """The ranks whose pending call is the extra one. A rank's line there is its own alone while the
    others' lines are ones it used too (a shifted sequence: the live run's rule); without stacks, its group
    is one the others never used while theirs is one it used."""
    ranks = sorted(stuck)
    site = {r: (f[0], f[1]) if (f := user_frame(stuck[r].pending)) else None for r in ranks}
    sites_of = {r: {f[:2] for e in inp.dumps[r].entries if (f := user_frame(e))} for r in ranks}
    extra = [
        r
        for r in ranks
        if site[r]
        and all(site[r] not in sites_of[o] for o in ranks if o != r)
        and all(site[o] in sites_of[r] for o in ranks if o != r)
    ]
    if extra and len(extra) < len(ranks):
        return extra
    group = {r: p.group for r in ranks if (p := stuck[r].pending) is not None}
    used = {r: used_groups(inp.dumps[r]) for r in ranks}
    extra = [
        r
        for r in ranks
        if all(group[r] not in used[o] for o in ranks if o != r) and all(group[o] in used[r] for o in ranks if o != r)
    ]
    return extra if extra and len(extra) < len(ranks) else []


def _divergence(
    inp: Inputs, stuck: dict[int, Stand], keys: dict[int, tuple[str, int]], unmet: dict[int, set[int]]
) -> Finding:
    extra = _extra(inp, stuck)
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
        locs = [loc for r in extra for loc in _loc(r, user_frame(stuck[r].pending), "diverged")]
        locs += [loc for r in waiters for loc in _loc(r, user_frame(stuck[r].pending), "waiting")]
        msg = (
            f"a collective is called on some ranks only: {ranks_phrase(extra)} made an extra {e.call()} on "
            f"group {e.group} (#{e.seq}){_at(user_frame(e))} that {ranks_phrase(waiters)} never issued"
        )
        if w is not None:
            msg += (
                f"; {ranks_phrase(waiters)} wait{'s' if len(waiters) == 1 else ''} in {w.call()} "
                f"(#{w.seq} of group {w.group}){_at(user_frame(w))}"
            )
        msg += f"; diverged: {ranks_phrase(extra)}"
        ev["fr_trace_would_blame"] = sorted(unmet.get(extra[0], ()))
        return Finding(
            "hang.rank-conditional-collective",
            "error",
            msg,
            HINTS["hang.rank-conditional-collective"],
            tuple(sorted(stuck)),
            tuple(locs),
            ev,
            culprits=tuple(extra),
        )
    counts = Counter(keys.values())
    odd = [r for r, k in keys.items() if counts[k] == min(counts.values())] if len(counts) > 1 else []
    culprits = tuple(sorted(odd)) if odd and len(odd) < len(keys) else ()
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
        "hang.divergent-collective",
        "error",
        f"ranks wait in different collectives: {parts}",
        HINTS["hang.divergent-collective"],
        tuple(sorted(stuck)),
        tuple(locs),
        ev,
        culprits=culprits,
    )


def _same_collective(stuck: dict[int, Stand]) -> Finding:
    pend = {r: s.pending for r, s in stuck.items() if s.pending}
    shapes = {r: (e.op, e.input_sizes, e.dtypes) for r, e in pend.items()}
    e0 = next(iter(pend.values()))
    ev = {"source": "flight recorder", "group": e0.group, "seq": e0.seq}
    if len(set(shapes.values())) > 1:
        counts = Counter(shapes.values())
        odd = tuple(sorted(r for r, k in shapes.items() if counts[k] == min(counts.values())))
        same_op = len({k[0] for k in shapes.values()}) == 1
        fid = "hang.shape-mismatch" if same_op else "hang.divergent-collective"
        parts = "; ".join(f"rank {r}: {e.call()}{_at(user_frame(e))}" for r, e in sorted(pend.items()))
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
        "hang.transport-stall",
        "error",
        f"every rank issued {e0.call()} (#{e0.seq} of group {e0.group}){_at(user_frame(e0))} and "
        "none completed it: the code paths agree, the transport does not deliver",
        HINTS["hang.transport-stall"],
        tuple(sorted(pend)),
        tuple(locs),
        ev,
        culprits=(),
    )


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
        msg += (
            f" and {ranks_phrase(lost)} failed in a collective because a peer went away ('Connection closed "
            f"by peer'): the first suspect is {ranks_phrase(missing)}, which most likely crashed or was killed"
        )
    else:
        msg += ": a rank that crashed or was killed writes none; the others show no collective pending"
    ev = {"source": "flight recorder", "missing": missing, "dumped": sorted(inp.dumps), "waiting": bool(waiting)}
    return Finding(
        "postmortem.no-dump",
        severity,
        msg,
        NO_DUMP_HINT,
        tuple(sorted(set(missing) | set(waiting) | set(lost))),
        tuple(locs),
        ev,
        culprits=tuple(missing),
    )


def _mixed(inp: Inputs) -> list[Finding]:
    """The same collective (group, seq) created further apart on two ranks than its timeout allows: the
    dumps cannot come from one attempt of one job."""
    first: dict[tuple[str, int], tuple[int, int, int]] = {}
    apart: set[tuple[int, int]] = set()
    for r, d in sorted(inp.dumps.items()):
        for e in d.entries:
            if e.is_p2p or not e.time_created_ns:
                continue
            k = (e.group, e.seq)
            if k not in first:
                first[k] = (r, e.time_created_ns, e.timeout_ms)
                continue
            r0, t0, to = first[k]
            slack_ns = (max(to, e.timeout_ms, 60_000) + 60_000) * 1_000_000
            if r0 != r and abs(e.time_created_ns - t0) > slack_ns:
                apart.add((r0, r))
    if not apart:
        return []
    pairs = sorted(apart)
    ranks = sorted({x for p in pairs for x in p})
    return [
        Finding(
            "postmortem.mixed-dumps",
            "warning",
            f"the dumps of {ranks_phrase(ranks)} come from different attempts or jobs: the same "
            f"collectives were created further apart than their timeout (e.g. ranks {pairs[0][0]} and "
            f"{pairs[0][1]}); the findings compare records that never met",
            MIXED_HINT,
            tuple(ranks),
            (),
            {"pairs": [list(p) for p in pairs]},
        )
    ]


def _notes(inp: Inputs, known: bool, missing: list[int]) -> list[str]:
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
            + ", ".join(f"rank {d.rank} ({d.fmt} v{d.version}, {len(d.entries)} entries)" for d in dumps[:8])
            + (f", and {len(dumps) - 8} more" if len(dumps) > 8 else "")
        )
    if not known and dumps:
        notes.append(
            f"the dumps do not say how many ranks the job had (gloo's pg_config is empty): ranks above "
            f"{max(inp.dumps)} that left no dump cannot be seen; give torchrun's log folder or the job's "
            "log too"
        )
    nostack = sorted(d.rank for d in dumps if not d.stacks and d.entries)
    if nostack:
        notes.append(
            f"{ranks_phrase(nostack)}: the dump holds no Python stacks (JSON dumps never do; pickle "
            "dumps with includeStackTraces=False neither): no user lines for these ranks"
        )
    for d in dumps:
        if d.entries and d.entries[0].record_id > 0:
            notes.append(
                f"rank {d.rank}: the ring dropped {d.entries[0].record_id} older entries "
                f"(TORCH_FR_BUFFER_SIZE is {len(d.entries)} or so): a divergence before record "
                f"{d.entries[0].record_id} cannot be seen"
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
    for r in sorted(world | set(stands) | set(fails)):
        s = stands.get(r)
        own = [e for e in fails.get(r, ()) if _own(e)]
        if own and not any(e.victim for e in fails.get(r, ())):
            e = own[0]
            sig = _signal_name(e.exitcode) if not e.frames else ""
            uf = e.user_frame()
            out.append(
                RankLine(
                    r,
                    "killed" if sig else "crashed",
                    f"killed by {sig}" if sig else e.message[:120],
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
                else "no collective recorded"
            )
            if any(e.victim for e in fails.get(r, ())):
                detail += "; its collective failed when a peer went away"
            uf = user_frame(last)
            out.append(RankLine(r, "busy", detail, Location(r, uf[0], uf[1], uf[2]) if uf else None))
        else:
            out.append(RankLine(r, "unresponsive", "left no flight-recorder dump"))
    return out
