"""Where each rank's step time goes: breakdown, stragglers, data-loader-bound steps, GPU utilisation. Pure.

Works on ddpdoctor's own timeline (``timeline.jsonl``), so it needs neither nsys nor a GPU.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from ddpdoctor.analysis.model import Config, Finding, Location
from ddpdoctor.analysis.state import loc
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

PHASES = ("data", "forward", "backward+comm", "optimizer", "other")
_PHASE_OF = {"dataloader wait": "data", "forward": "forward", "backward": "backward+comm",
             "optimizer step": "optimizer"}
DATA_BOUND = 0.30       # data wait above this share of the step
STRAGGLER_SHARE = 0.10  # a rank's excess in one phase above this share of the step
GPU_UTIL_MIN = 90


def breakdown(timeline: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Per step (after the first): milliseconds per phase; ranges are assigned to the step they start in."""
    ranges = [e for e in timeline if e.get("kind") == schema.K_RANGE]
    steps = sorted((e for e in ranges if e.get("name") == "step"), key=lambda e: e["t0"])
    others = sorted((e for e in ranges if e.get("name") in _PHASE_OF), key=lambda e: e["t0"])
    out = []
    j = 0
    for st in steps:
        ph = dict.fromkeys(PHASES, 0.0)
        while j < len(others) and others[j]["t0"] < st["t0"]:
            j += 1
        k = j
        while k < len(others) and others[k]["t0"] < st["t1"]:
            e = others[k]
            ph[_PHASE_OF[e["name"]]] += (e["t1"] - e["t0"]) / 1e6
            k += 1
        total = (st["t1"] - st["t0"]) / 1e6
        ph["other"] = max(0.0, total - sum(ph[p] for p in PHASES if p != "other"))
        ph["step"] = total
        out.append(ph)
    return out


def steady(rows: list[dict[str, float]]) -> list[dict[str, float]]:
    skip = max(1, len(rows) // 5)
    return rows[skip:] if len(rows) > skip + 1 else rows


def medians(record: RunRecord) -> dict[int, dict[str, float]]:
    out = {}
    for r, rec in record.ranks.items():
        rows = steady(breakdown(rec.timeline))
        if rows:
            out[r] = {p: median(x[p] for x in rows) for p in (*PHASES, "step")}
            out[r]["steps"] = float(len(rows))
    return out


def detect(record: RunRecord, cfg: Config) -> list[Finding]:
    if not any(rec.timeline for rec in record.ranks.values()):
        return []
    med = medians(record)
    out: list[Finding] = []
    if len(med) >= 2:
        out += _straggler(record, med)
    out += _data_bound(record, med)
    out += _gpu(record)
    out += _summary(record, med)
    return out


def _straggler(record: RunRecord, med: dict[int, dict[str, float]]) -> list[Finding]:
    step = median(m["step"] for m in med.values())
    best = None
    for phase in ("data", "forward", "optimizer", "other"):
        vals = {r: m[phase] for r, m in med.items()}
        slow = max(vals, key=lambda r: vals[r])
        rest = median(v for r, v in vals.items() if r != slow)
        excess = vals[slow] - rest
        if excess >= max(2.0, STRAGGLER_SHARE * step) and (best is None or excess > best[2]):
            best = (slow, phase, excess, rest, vals[slow])
    if best is None:
        return []
    slow, phase, excess, rest, mine = best
    others = sorted(r for r in med if r != slow)
    waits = {r: round(med[r]["backward+comm"] - med[slow]["backward+comm"], 2) for r in others}
    where = _dataloader_site(record, slow) if phase == "data" else None
    return [Finding("profile.straggler", "warning",
                    f"rank {slow} is the straggler: its {phase} takes {mine:.1f} ms per step vs {rest:.1f} ms on the "
                    f"others (+{excess:.1f} ms, {100 * excess / step:.0f}% of a {step:.1f} ms step); the other ranks "
                    f"wait for it in their gradient all-reduce ({', '.join(f'rank {r} +{w:.1f} ms' for r, w in waits.items())})",
                    "Look at what only this rank does in that phase (rank-only logging or evaluation, a slower "
                    "device or host, uneven sample sizes); every step runs at the slowest rank's pace.",
                    (slow, *others), (where,) if where else (),
                    {"rank": slow, "phase": phase, "excess_ms": excess, "phase_ms": mine, "others_ms": rest,
                     "step_ms": step}), ]


def _dataloader_site(record: RunRecord, rank: int) -> Location | None:
    e = record.ranks[rank].event("dataloader")
    return loc(rank, e.get("site"), "DataLoader loop") if e else None


def _data_bound(record: RunRecord, med: dict[int, dict[str, float]]) -> list[Finding]:
    hits = {r: m["data"] / m["step"] for r, m in med.items() if m["step"] > 0 and m["data"] / m["step"] >= DATA_BOUND}
    if not hits:
        return []
    ranks = tuple(sorted(hits))
    locs = tuple(l for r in ranks if (l := _dataloader_site(record, r)))
    share = median(hits.values())
    return [Finding("profile.dataloader-bound", "warning",
                    f"rank(s) {list(ranks)} spend {100 * share:.0f}% of each step waiting for the DataLoader",
                    "Raise num_workers (and use persistent_workers=True, pin_memory=True on GPU), make "
                    "__getitem__ cheaper, or prefetch; the model waits for data.", ranks, locs,
                    {"data_share": {str(r): round(v, 3) for r, v in hits.items()}})]


def _gpu(record: RunRecord) -> list[Finding]:
    low = {}
    for r, rec in record.ranks.items():
        util = [e["util"] for e in rec.timeline if e.get("kind") == schema.K_GPU]
        if len(util) >= 3 and median(util) < GPU_UTIL_MIN:
            low[r] = median(util)
    if not low:
        return []
    return [Finding("profile.low-gpu-util", "warning",
                    f"GPU utilisation below {GPU_UTIL_MIN}% (NVML): " + ", ".join(f"rank {r} {u:.0f}%" for r, u in low.items()),
                    "The GPU waits for the host: data loading, Python overhead, small kernels or communication.",
                    tuple(sorted(low)), (), {"util": {str(r): u for r, u in low.items()}})]


def _summary(record: RunRecord, med: dict[int, dict[str, float]]) -> list[Finding]:
    info = {r: next((e for e in reversed(rec.timeline) if e.get("kind") == "profile_info"), {})
            for r, rec in record.ranks.items()}
    if not med:
        return []
    parts = []
    for r, m in sorted(med.items()):
        parts.append(f"rank {r}: step {m['step']:.1f} ms = " +
                     " + ".join(f"{p} {m[p]:.1f}" for p in PHASES))
    i0 = next(iter(info.values()), {})
    buckets = i0.get("buckets") or []
    steps, fwd = i0.get("steps") or 0, i0.get("forwards") or 0
    accum = round(fwd / steps, 2) if steps else None
    tuning = (f"DDP buckets: {len(buckets)} ({', '.join(f'{b / 2**20:.2f}' for b in buckets[:8])} MiB; "
              f"bucket_cap_mb {i0.get('bucket_cap_mb', 0):.0f}); AMP {'on' if i0.get('amp') else 'off'}; "
              f"forwards per optimizer step {accum}; NVTX {'emitted' if i0.get('nvtx') else 'not emitted (no tool attached)'}")
    return [Finding("profile.summary", "note", "; ".join(parts) + ". " + tuning,
                    "Steady state after the first 20% of steps. Open trace.json in ui.perfetto.dev for the timeline.",
                    tuple(sorted(med)), (), {"median_ms": {str(r): m for r, m in med.items()},
                                             "buckets": buckets, "amp": i0.get("amp"), "accumulation": accum})]
