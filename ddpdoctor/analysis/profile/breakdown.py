"""Where each rank's step time goes: breakdown, stragglers, data-loader-bound steps, GPU utilisation. Pure.

Works on ddpdoctor's own timeline (``timeline.jsonl``), so it needs neither nsys nor a GPU. Each rank's
typical step and its phases (``steps.typical``: the parts add up to the step) come from the timeline's
ranges; the user line inside a phase comes from the main-thread samples (``samples`` records: counts per
phase and line), turned into ms per step as the line's share of the phase's samples times the phase's ms.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from statistics import median, median_low
from typing import Any

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, Location, rank_list, ranks_phrase
from ddpdoctor.analysis.ids import PROFILE_DATALOADER_BOUND, PROFILE_LOW_GPU_UTIL, PROFILE_STRAGGLER, PROFILE_SUMMARY
from ddpdoctor.analysis.profile.steps import (
    PHASES,
    Hot,
    Samples,
    _between,
    _line_phrase,
    _short,
    _step_order,
    fsdp_comm,
    rounded_parts,
    samples_of,
    typical,
)
from ddpdoctor.analysis.state import loc
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

STRAGGLER_PHASES = ("data", "forward", "optimizer", "other")  # a wait lands in backward+comm or collective
DATA_BOUND = 0.30  # data wait above this share of the step
STRAGGLER_SHARE = 0.10  # a rank's excess in one phase above this share of the median step ...
STRAGGLER_MIN_MS = 5.0  # ... and above this many ms (scheduling noise on a busy host stays below)
LINE_MIN_SAMPLES = 2  # a line needs this many samples to be named
GPU_UTIL_MIN = 90
MAX_LOCS_PER_LINE = 4  # per (line, role): at most this many ranks' locations; the message groups the rest


def detect(record: RunRecord, cfg: Config) -> list[Finding]:
    """The profile findings: stragglers, data-loader-bound steps, low GPU utilisation, the breakdown."""
    if not any(rec.timeline for rec in record.ranks.values()):
        return []
    med = typical(record)
    samples = {r: samples_of(rec.timeline) for r, rec in record.ranks.items()}
    out: list[Finding] = []
    if len(med) >= 2:
        out += _straggler(record, med, samples)
    out += _data_bound(record, med, samples)
    out += _gpu(record)
    out += _summary(record, med)
    return out


def _grouped(locs: list[Location]) -> tuple[Location, ...]:
    """At most MAX_LOCS_PER_LINE ranks per (line, role): short at any world size."""
    seen: Counter = Counter()
    out = []
    for l in sorted(locs, key=lambda l: l.rank):
        k = (l.file, l.line, l.role)
        seen[k] += 1
        if seen[k] <= MAX_LOCS_PER_LINE:
            out.append(l)
    return tuple(out)


def _slow_line(
    r: int, phase: str, med: dict[int, dict[str, float]], samples: dict[int, Samples], peers: list[int]
) -> Hot | None:
    """The culprit's line in ``phase`` with the most ms per step beyond what its peers spend there."""
    best, best_x = None, 0.0
    for h in samples[r].hot(phase, med[r][phase]):
        if h.count < LINE_MIN_SAMPLES:
            continue
        theirs = [samples[o].ms_at(phase, (h.file, h.line), med[o][phase]) for o in peers if o in samples and o in med]
        x = h.ms - (median(theirs) if theirs else 0.0)
        if best is None or x > best_x:
            best, best_x = h, x
    return best


def _wait_phase(r: int, culprits: list[int], med: dict[int, dict[str, float]]) -> str:
    """Where a rank that waits for the culprits spends the extra time (usually backward: DDP's all-reduce)."""
    theirs = {p: median(med[c][p] for c in culprits) for p in PHASES}
    return max(
        ("backward+comm", "collective", "data", "forward", "optimizer", "other"), key=lambda p: med[r][p] - theirs[p]
    )


def _loop_func(samples: dict[int, Samples]) -> str | None:
    """The function that calls ``backward()`` (the training loop), from the samples of any rank."""
    c: Counter = Counter()
    for s in samples.values():
        for key, n in s.counts["backward+comm"].items():
            c[s.func.get(key, "")] += n
    return c.most_common(1)[0][0] if c else None


def _waiters(
    culprits: list[int], others: list[int], med: dict[int, dict[str, float]], samples: dict[int, Samples]
) -> tuple[str, list[Location], dict[int, float]]:
    """Where the ranks that wait for the culprits wait: a message tail, their locations, ms per step."""
    if not others:
        return "", [], {}
    locs: list[Location] = []
    wait_lines: dict[tuple[str, int], list[int]] = defaultdict(list)
    wait_hot: dict[tuple[str, int], Hot] = {}
    wait_ms: dict[int, float] = {}
    wphase_of = {}
    for r in others:
        wp = _wait_phase(r, culprits, med)
        wphase_of[r] = wp
        wait_ms[r] = med[r][wp] - median(med[c][wp] for c in culprits)
        hs = [x for x in samples[r].hot(wp, med[r][wp]) if x.count >= LINE_MIN_SAMPLES] if r in samples else []
        if hs:
            wait_lines[(hs[0].file, hs[0].line)].append(r)
            wait_hot.setdefault((hs[0].file, hs[0].line), hs[0])
            locs.append(Location(r, hs[0].file, hs[0].line, hs[0].func, "waiting"))
    wp = Counter(wphase_of.values()).most_common(1)[0][0]
    what = {"backward+comm": "backward (DDP's gradient all-reduce)", "collective": "a collective"}.get(wp, wp)
    verb = "waits" if len(others) == 1 else "wait"
    them = "it" if len(culprits) == 1 else "them"
    tail = f"; {ranks_phrase(others)} {verb} for {them} in {what}"
    if wait_lines:
        key, rs = max(wait_lines.items(), key=lambda kv: len(kv[1]))
        w = wait_hot[key]
        text = f" (`{w.text}`)" if w.text else ""
        tail += f" at {_short(w.file)}:{w.line}{text}"
        if len(wait_lines) > 1:
            tail += f" ({ranks_phrase(rs)}; the others at {len(wait_lines) - 1} other line(s))"
    tail += f", +{median(wait_ms.values()):.0f} ms/step"
    return tail, locs, wait_ms


def _data_bound_ranks(med: dict[int, dict[str, float]]) -> dict[int, float]:
    return {r: m["data"] / m["step"] for r, m in med.items() if m["step"] > 0 and m["data"] / m["step"] >= DATA_BOUND}


def _straggler(record: RunRecord, med: dict[int, dict[str, float]], samples: dict[int, Samples]) -> list[Finding]:
    step = median(m["step"] for m in med.values())
    thr = max(STRAGGLER_MIN_MS, STRAGGLER_SHARE * step)
    bound = _data_bound_ranks(med)
    best = None
    for phase in STRAGGLER_PHASES:
        vals = {r: m[phase] for r, m in med.items()}
        base = median_low(vals.values())  # of 2 ranks: the faster one
        slow = {r: v - base for r, v in vals.items() if v - base >= thr}
        if phase == "data" and slow and set(slow) <= set(bound):
            continue  # the DataLoader sets the pace: profile.dataloader-bound says so, with who waits
        if slow and 2 * len(slow) < len(vals) + 1 and (best is None or max(slow.values()) > max(best[2].values())):
            best = (phase, base, slow)
    if best is None:
        return []
    phase, base, slow = best
    culprits = sorted(slow)
    worst = max(culprits, key=lambda r: slow[r])
    others = sorted(r for r in med if r not in slow)
    loop_func = _loop_func(samples)

    # the culprits' lines
    locs: list[Location] = []
    hot: dict[int, Hot] = {}
    for r in culprits:
        h = _slow_line(r, phase, med, samples, others)
        if h is not None:
            hot[r] = h
            locs.append(Location(r, h.file, h.line, h.func, "slow"))
    order = _step_order(record.ranks[worst].timeline)
    where_ph = f"'{phase}'" if phase == "other" else phase
    h = hot.get(worst)
    if phase == "other":
        sub = _between(h.after if h else "", order)
        if sub:
            where_ph += f" {sub}"
    if phase == "data" and not h:
        dl = _dataloader_site(record, worst, "slow")
        if dl:
            locs.append(dl)
    xs = [slow[r] for r in culprits]
    if len(culprits) == 1:
        head = f"rank {worst} is {xs[0]:.0f} ms/step slower than the median in {where_ph}"
    else:
        span = f"{min(xs):.0f}" if round(min(xs)) == round(max(xs)) else f"{min(xs):.0f}-{max(xs):.0f}"
        head = f"{ranks_phrase(culprits)} are {span} ms/step slower than the median in {where_ph}"
    if h:
        head += f", at {_line_phrase(h, loop_func)}"
        n_lines = len({(x.file, x.line) for x in hot.values()})
        if n_lines > 1:
            head += f" (rank {worst}; {n_lines - 1} other line(s) on the other slow ranks)"

    # where the others wait
    tail, wlocs, wait_ms = _waiters(culprits, others, med, samples)
    locs += wlocs
    return [
        Finding(
            PROFILE_STRAGGLER,
            "warning",
            head + tail,
            "Look at what only the slow rank does at that line (rank-only logging, evaluation or "
            "checkpointing, a slower device or host, uneven sample sizes); every step runs at the slowest "
            "rank's pace. Move rank-only work out of the step, or make it asynchronous.",
            tuple(sorted(med)),
            _grouped(locs),
            {
                "rank": worst,
                "phase": phase,
                "excess_ms": slow[worst],
                "phase_ms": med[worst][phase],
                "others_ms": base,
                "step_ms": step,
                "threshold_ms": thr,
                "culprits": rank_list(culprits),
                "excess_by_rank": {str(r): round(slow[r], 2) for r in culprits},
                "line": [h.file, h.line, h.func] if h else None,
                "line_ms": round(h.ms, 2) if h else None,
                "between": _between(h.after, order) if h and phase == "other" else None,
                "wait_ms": {str(r): round(w, 2) for r, w in wait_ms.items()}
                if len(others) <= 64
                else {"median": round(median(wait_ms.values()), 2)}
                if wait_ms
                else {},
            },
            culprits=tuple(culprits),
        )
    ]


def _dataloader_site(record: RunRecord, rank: int, role: str = "data loop") -> Location | None:
    e = record.ranks[rank].event("dataloader")
    return loc(rank, e.get("site"), role) if e else None


def _data_bound(record: RunRecord, med: dict[int, dict[str, float]], samples: dict[int, Samples]) -> list[Finding]:
    """Ranks that wait 30 % of a step or more for the DataLoader. When the others do not, it is because they
    wait for these in their gradient all-reduce (the job runs at the data's pace): they are named as waiting."""
    hits = _data_bound_ranks(med)
    if not hits:
        return []
    ranks = tuple(sorted(hits))
    locs: list[Location] = []
    hot_lines: Counter = Counter()
    hot: dict[tuple[str, int], Hot] = {}
    loop_lines = set()
    for r in ranks:
        dl = _dataloader_site(record, r)
        hs = [h for h in samples[r].hot("data", med[r]["data"]) if h.count >= LINE_MIN_SAMPLES] if r in samples else []
        in_process = bool(hs) and (hs[0].file, hs[0].line) != ((dl.file, dl.line) if dl else None)
        if in_process:  # num_workers=0: __getitem__ runs on the main thread, the samples show its line
            locs.append(Location(r, hs[0].file, hs[0].line, hs[0].func, "slow"))
            hot_lines[(hs[0].file, hs[0].line)] += 1
            hot.setdefault((hs[0].file, hs[0].line), hs[0])
        if dl:  # the loop: with workers, the main thread waits here for them
            loop_lines.add((dl.file, dl.line))
            locs.append(dl if in_process else Location(r, dl.file, dl.line, dl.func, "slow"))
    share = median(hits.values())
    msg = (
        f"{ranks_phrase(ranks)} {'spends' if len(ranks) == 1 else 'spend'} {100 * share:.0f}% of each step "
        f"waiting for the DataLoader"
    )
    if hot_lines:
        h = hot[hot_lines.most_common(1)[0][0]]
        text = f" (`{h.text}`)" if h.text else ""
        fn = f" in {h.func}" if h.func else ""
        msg += (
            f"; the time goes to {_short(h.file)}:{h.line}{fn}{text}, ~{h.ms:.0f} ms/step, in the training "
            f"process itself (num_workers=0)"
        )
    elif loop_lines:
        f, l = sorted(loop_lines)[0]
        msg += f", at the loop {_short(f)}:{l} (the workers do not keep up)"
    others = sorted(r for r in med if r not in hits)
    wait_ms: dict[int, float] = {}
    if others and len(med) >= 2:
        tail, wlocs, wait_ms = _waiters(list(ranks), others, med, samples)
        if wait_ms and median(wait_ms.values()) >= STRAGGLER_MIN_MS:
            msg += tail + " (every rank runs at the DataLoader's pace)"
            locs += wlocs
        else:
            wait_ms = {}
    return [
        Finding(
            PROFILE_DATALOADER_BOUND,
            "warning",
            msg,
            "Raise num_workers (and use persistent_workers=True, pin_memory=True on GPU), make "
            "__getitem__ cheaper, or prefetch; the model waits for data.",
            tuple(sorted(med)),
            _grouped(locs),
            {
                "data_share": {str(r): round(v, 3) for r, v in hits.items()}
                if len(hits) <= 64
                else {"median": round(share, 3)},
                "wait_ms": {str(r): round(w, 2) for r, w in wait_ms.items()}
                if len(wait_ms) <= 64
                else {"median": round(median(wait_ms.values()), 2)},
            },
            culprits=ranks,
        )
    ]


def _gpu(record: RunRecord) -> list[Finding]:
    low = {}
    for r, rec in record.ranks.items():
        util = [e["util"] for e in rec.timeline if e.get("kind") == schema.K_GPU]
        if len(util) >= 3 and median(util) < GPU_UTIL_MIN:
            low[r] = median(util)
    if not low:
        return []
    groups: dict[int, list[int]] = defaultdict(list)
    for r, u in low.items():
        groups[int(round(u / 10) * 10)].append(r)
    return [
        Finding(
            PROFILE_LOW_GPU_UTIL,
            "warning",
            f"GPU utilisation below {GPU_UTIL_MIN}% (NVML): "
            + ", ".join(f"{ranks_phrase(rs)} ~{u}%" for u, rs in sorted(groups.items())),
            "The GPU waits for the host: data loading, Python overhead, small kernels or communication.",
            tuple(sorted(low)),
            (),
            {"util": {str(r): u for r, u in low.items()}},
            culprits=tuple(sorted(low)),
        )
    ]


def _size(n: float) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def _fsdp_text(
    fsdp: dict[str, Any], comm: dict[str, float], rank: int | None, accum: float | None, info: dict[str, Any]
) -> str:
    """The summary's words on an FSDP job (``fsdp_words``), then AMP, forwards per step and NVTX."""
    return (
        fsdp_words(fsdp, comm, rank)
        + f"; AMP {'on' if info.get('amp') else 'off'}; forwards per step {accum}; "
        + f"NVTX {'emitted' if info.get('nvtx') else 'not emitted (no tool attached)'}"
    )


def fsdp_words(fsdp: dict[str, Any], comm: dict[str, float], rank: int | None) -> str:
    """An FSDP job's sharding in words, where a DDP job's summary shows its buckets (the summary, the HTML
    report): FSDP2's modules, mesh, reshard_after_forward and mixed precision; FSDP1's strategy, wrapped
    modules and flat parameters, mixed precision, use_orig_params and CPU offload; the bytes sharded on
    ``rank`` and the time in FSDP's collectives per step (``comm``: ``fsdp_comm`` of that rank)."""
    mp = fsdp.get("mp") or {}
    mp_text = ", ".join(f"{k.removesuffix('_dtype')} {v}" for k, v in mp.items()) if mp else "off"
    if fsdp.get("kind") == "FSDP1":
        strategies = fsdp.get("strategies") or {}
        if len(strategies) == 1:
            strategy = next(iter(strategies))
        else:
            strategy = ", ".join(f"{k} on {v}" for k, v in sorted(strategies.items())) or "?"
        group = f"{fsdp.get('world', '?')} rank(s)"
        if fsdp.get("replicas"):
            group += f" x {fsdp['replicas']} replica(s)"
        out = (
            f"FSDP1: {strategy}, {fsdp.get('modules', 0)} FSDP module(s), {fsdp.get('flat_params', 0)} flat "
            f"parameter(s) of {fsdp.get('params', 0)} parameters ({_size(int(fsdp.get('sharded_bytes') or 0))} "
            f"sharded on rank {rank}, shard group of {group}); mixed precision {mp_text}; "
            f"use_orig_params {'on' if fsdp.get('use_orig_params') else 'off'}; "
            f"CPU offload {'on' if fsdp.get('cpu_offload') else 'off'}"
        )
    else:
        mesh = fsdp.get("mesh") or {}
        shape = "x".join(str(x) for x in mesh.get("shape") or []) or "?"
        dims = f" ({', '.join(mesh['dims'])})" if mesh.get("dims") else ""
        n, rs = int(fsdp.get("modules") or 0), int(fsdp.get("reshard_after_forward") or 0)
        out = (
            f"FSDP2: {n} sharded module(s) with parameters on a mesh of {shape}{dims}, {fsdp.get('params', 0)} "
            f"parameters ({_size(int(fsdp.get('sharded_bytes') or 0))} sharded on rank {rank}); "
            f"reshard_after_forward on {rs} of {n}; mixed precision {mp_text}"
        )
    if comm:
        kind = "FSDP1" if fsdp.get("kind") == "FSDP1" else "FSDP2"
        out += f"; in {kind}'s collectives per step (rank {rank}, inside forward and backward): " + ", ".join(
            f"{k} {v:.1f} ms" for k, v in comm.items()
        )
    return out


def _summary(record: RunRecord, med: dict[int, dict[str, float]]) -> list[Finding]:
    info: dict[int, dict[str, Any]] = {
        r: next((e for e in reversed(rec.timeline) if e.get("kind") == schema.K_PROFILE_INFO), {})
        for r, rec in record.ranks.items()
    }
    if not med:
        return []
    shown = [p for p in PHASES if p != "collective" or any(m[p] > 0 for m in med.values())]
    parts = []
    # ranks with the same rounded breakdown are grouped: short at any world size
    groups: dict[str, list[int]] = defaultdict(list)
    for r, m in sorted(med.items()):
        step, part = rounded_parts({p: m[p] for p in shown})  # the shown parts add up to the shown step
        groups[f"step {step:.1f} ms = " + " + ".join(f"{p} {part[p]:.1f}" for p in shown)].append(r)
    for text, rs in sorted(groups.items(), key=lambda kv: kv[1][0])[:16]:
        parts.append(f"{ranks_phrase(rs)}: {text}")
    if len(groups) > 16:
        parts.append(f"... {len(groups) - 16} more groups")
    r0, i0 = next(((r, i) for r, i in info.items() if i), (None, {}))  # a rank ended by --steps may have none
    buckets = i0.get("buckets") or []
    steps, fwd = i0.get("steps") or 0, i0.get("forwards") or 0
    accum = round(fwd / steps, 2) if steps else None
    tuning = (
        f"DDP buckets: {len(buckets)} ({', '.join(_size(b) for b in buckets[:8])}; "
        f"bucket_cap_mb {i0.get('bucket_cap_mb', 0):g}); AMP {'on' if i0.get('amp') else 'off'}; "
        f"forwards per optimizer step {accum}; NVTX {'emitted' if i0.get('nvtx') else 'not emitted (no tool attached)'}"
    )
    fsdp = i0.get("fsdp") if isinstance(i0.get("fsdp"), dict) else None
    comm: dict[str, float] = {}
    if fsdp:  # the sharding where a DDP job's buckets are
        comm = {k: round(v, 3) for k, v in fsdp_comm(record.ranks[r0].timeline if r0 is not None else []).items()}
        tuning = _fsdp_text(fsdp, comm, r0, accum, i0)
    ddp: dict[str, Any] = i0["ddp"] if isinstance(i0.get("ddp"), dict) else {}
    if ddp.get("comm_ms") is not None:
        tuning += (
            f"; DDP's own timers (rank {r0}, averaged over the iterations DDP timed): backward "
            f"compute {ddp.get('backward_ms', 0):.2f} ms, gradient all-reduce {ddp['comm_ms']:.2f} ms, "
            f"{ddp.get('overlap_ms', 0):.2f} ms of it overlapped"
        )
    return [
        Finding(
            PROFILE_SUMMARY,
            "note",
            # a note has nothing to fix: what the figures are goes in the message
            "typical steady step (the middle half of the steps after the first 20%; the parts add up to it): "
            + "; ".join(parts)
            + ". "
            + tuning,
            "",
            tuple(sorted(med)),
            (),
            {
                "typical_ms": {str(r): m for r, m in med.items()} if len(med) <= 64 else {},
                "buckets": buckets,
                "amp": i0.get("amp"),
                "accumulation": accum,
                "ddp_timers_ms": ddp,
                **({"fsdp": fsdp, "fsdp_rank": r0, "fsdp_comm_ms": comm} if fsdp else {}),
            },
        )
    ]
