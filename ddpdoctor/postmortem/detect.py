"""Findings from torch's own records of a job: flight-recorder dumps, torchrun error files and failure
summaries. The same ids, culprits and user lines as a live run, from what the dumps hold. Pure: no torch.

Where torch's ``fr_trace`` matches collectives by sequence id and reports the ranks missing from one,
this names the rank that made an extra call (its line is its own alone, or its group one the others
never used), and the rank that left no dump when the others wait for it.
"""

from __future__ import annotations

import operator
import os
import signal
import time
from collections.abc import Sequence

from ddpdoctor.analysis.findings import Finding, Location, RankLine, ranks_phrase
from ddpdoctor.analysis.hang import judge, policy
from ddpdoctor.analysis.hang.dumps import DumpCase, _at, _calls, _loc, _site
from ddpdoctor.analysis.hang.facts import ABSENT, Slot
from ddpdoctor.analysis.hang.sources.flight import (
    Stand,
    completed_anywhere,
    stand,
    user_frame,
)
from ddpdoctor.analysis.ids import (
    COLLECTIVE_SHAPE_MISMATCH,
    CRASH_ABNORMAL_EXIT,
    CRASH_EXCEPTION,
    POSTMORTEM_MIXED_DUMPS,
)
from ddpdoctor.postmortem.errorfiles import RankError
from ddpdoctor.postmortem.flight import Dump, Entry, compared_outputs, indices_of, take
from ddpdoctor.postmortem.inputs import Inputs

KILLED_HINT = (
    "The rank was ended by a signal and left neither a dump nor a traceback: look at why (SIGKILL: the OOM "
    "killer, `dmesg`, the scheduler's memory limit; SIGSEGV/SIGABRT: a native crash); the other ranks' "
    "errors ('Connection closed by peer') are consequences."
)


MIXED_HINT = (
    "Analyze the dumps of one attempt of one job together: clear the dump folder between runs, or put the "
    "job id in TORCH_FR_DUMP_TEMP_FILE."
)


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


def findings(inp: Inputs, more: Sequence[policy.Case] = ()) -> tuple[list[Finding], list[RankLine], list[str]]:
    """The findings, one line per rank, and the notes (what the records cannot tell). ``more``: other
    evidence of the same job (the stacks ``attach`` took with the dumps), judged with the dumps as one."""
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
        # the hang: the one policy over the dumps' evidence (analysis/hang/dumps.py)
        out += policy.judge(DumpCase(inp, stands, world, known, missing, fails, torn_down(fails)), *more)
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


CLOCK_SLACK_MS = 5_000  # clocks of two nodes may differ by this much; one host's ranks share one clock


UNKNOWN_TIMEOUT_MS = 30 * 60_000  # a collective's timeout where none is recorded: gloo's default, the longest


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
