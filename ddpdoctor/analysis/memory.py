"""Memory that grows step after step: on which rank, in which layer, and why. Pure.

A series is judged after a warm-up (the first 20 % of its samples, at least 3), with a Theil-Sen slope
(robust to the allocator's jumps) over the second half of the run: a cache that fills and then stays
flat has a flat second half and is not a leak.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from ddpdoctor.analysis.model import Config, Finding, Location
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

MIN_SAMPLES = 4


def theil_sen(xs: list[float], ys: list[float]) -> float:
    pts = list(zip(xs, ys))
    if len(pts) > 150:  # O(n^2): thin long series evenly
        step = len(pts) / 150
        pts = [pts[int(i * step)] for i in range(150)]
    slopes = [(y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(pts) for x2, y2 in pts[i + 1:] if x2 != x1]
    return median(slopes) if slopes else 0.0


def growth(points: list[tuple[float, float]]) -> dict[str, float] | None:
    """Slopes per step after warm-up: overall, and over the later half (the part that decides)."""
    if len(points) < MIN_SAMPLES:
        return None
    warm = max(3, len(points) // 5) if len(points) >= 8 else 1
    pts = points[warm:]
    if len(pts) < 3:
        return None
    half = pts[len(pts) // 2:] if len(pts) >= 6 else pts
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    hx, hy = [p[0] for p in half], [p[1] for p in half]
    ups = sum(1 for a, b in zip(hy, hy[1:]) if b > a)
    return {"slope": theil_sen(xs, ys), "late_slope": theil_sen(hx, hy), "total": ys[-1] - ys[0],
            "late_total": hy[-1] - hy[0], "up_fraction": ups / max(1, len(hy) - 1), "steps": xs[-1] - xs[0],
            "last": ys[-1], "first_step": xs[0], "last_step": xs[-1]}


def _leaking(g: dict[str, float] | None, min_slope: float, min_total: float) -> bool:
    return bool(g and g["late_slope"] >= min_slope and g["late_total"] >= min_total and g["up_fraction"] >= 0.5)


def _census(record: RunRecord) -> dict[int, list[dict[str, Any]]]:
    return {r: [e for e in rec.memory if e.get("kind") == schema.K_CENSUS] for r, rec in record.ranks.items()}


def _steps(record: RunRecord) -> dict[int, list[dict[str, Any]]]:
    return {r: [e for e in rec.memory if e.get("kind") == schema.K_MEM] for r, rec in record.ranks.items()}


def _who(ranks: list[int], all_ranks: list[int]) -> str:
    if len(ranks) == len(all_ranks):
        return "on every rank"
    return f"only on rank(s) {ranks} (rank-conditional code)"


def _mb(x: float) -> str:
    if abs(x) >= 2**20:
        return f"{x / 2**20:.2f} MiB"
    return f"{x / 1024:.1f} KiB"


def detect(record: RunRecord, cfg: Config) -> list[Finding]:
    census, steps = _census(record), _steps(record)
    ranks = sorted(r for r in record.ranks if steps.get(r))
    if not ranks:
        return []
    out: list[Finding] = []
    out += _graphs(census, ranks, steps)
    out += _tensor_groups(census, ranks, {f.id for f in out})
    out += _layers(census, steps, ranks, {f.id for f in out})
    return out


def _project(steps: list[dict[str, Any]], census: list[dict[str, Any]], per_step: float, key: str) -> str:
    if per_step <= 0:
        return ""
    if key == "cuda":
        last = steps[-1] if steps else {}
        free = (last.get("nvml_total") or 0) - (last.get("nvml_used") or 0)
        where = "the GPU"
    else:
        free = (census[-1].get("host_available") or 0) if census else 0
        where = "the host"
    if free <= 0:
        return ""
    return f"; at this rate {where} is full in about {int(free / per_step):,} more steps"


def _graphs(census: dict[int, list], ranks: list[int], steps: dict[int, list]) -> list[Finding]:
    """Autograd graphs kept alive: from the dense scan of the user's variables (every few steps), else
    from the censuses of all live tensors."""
    hits = {}
    for r in ranks:
        dense = [(s["step"], float(s["local_graph"])) for s in steps.get(r, []) if "local_graph" in s]
        sparse = [(c["step"], float(c.get("graph_nodes", 0))) for c in census.get(r, [])]
        for pts in (dense, sparse):
            g = growth(pts)
            if _leaking(g, 0.5, 5):
                hits[r] = g
                break
    if not hits:
        return []
    hr = sorted(hits)
    locs, holders = [], {}
    for r in hr:
        last = census[r][-1] if census.get(r) else {}
        h = next((s["local_holder"] for s in reversed(steps.get(r, [])) if s.get("local_holder")), None)
        if not h:
            h = next((b.get("holder") for b in last.get("biggest_graphs", []) if b.get("holder")), None)
        if not h:
            h = next(iter((last.get("group_holders") or {}).values()), None)
        if h:
            holders[r] = h
            locs.append(Location(r, h["file"], int(h["line"]), h.get("func", ""), f"keeps the graph: {h['name']}"))
    per = median(g["late_slope"] for g in hits.values())
    rss = [growth([(s["step"], float(s.get("rss", 0))) for s in steps[r]]) for r in hr]
    rss_slope = median(g["slope"] for g in rss if g) if any(rss) else 0.0
    name = next(iter(holders.values()), {}).get("name", "")
    stored = name.endswith(("[]", "{}"))
    cause = ("outputs stored with their autograd graph" if stored else
             "a tensor accumulated across steps with its autograd graph (e.g. `total += loss`)")
    held = f" (held by `{name.rstrip('[]{}')}`)" if name else ""
    msg = (f"autograd graph grows by {per:.1f} nodes per step {_who(hr, ranks)}: {cause}{held}; "
           f"RSS {'+' + _mb(rss_slope) + '/step' if rss_slope > 0 else 'barely moves'}"
           + _project(steps[hr[0]], census[hr[0]], rss_slope, "host"))
    hint = ("Store `out.detach()` (or `.cpu().detach()`), not the output itself." if stored else
            "Accumulate `loss.item()` or `loss.detach()`, not `loss`: each step's graph stays alive otherwise.")
    return [Finding("memleak.autograd-graph", "error", msg, hint, tuple(hr), tuple(locs),
                    {"nodes_per_step": per, "rss_bytes_per_step": rss_slope,
                     "ranks_growing": hr, "holders": {str(r): h for r, h in holders.items()}})]


def _tensor_groups(census: dict[int, list], ranks: list[int], seen: set[str]) -> list[Finding]:
    """Live tensors of one kind (shape, dtype, device) whose number keeps growing."""
    hits: dict[int, tuple] = {}
    for r in ranks:
        cs = census.get(r, [])
        keys = {(tuple(g["shape"]), g["dtype"], g["device"], g["grad_fn"]) for c in cs for g in c.get("groups", [])}
        best = None
        for k in keys:
            pts = []
            for c in cs:
                n = next((g["bytes"] for g in c.get("groups", []) if (tuple(g["shape"]), g["dtype"], g["device"],
                                                                         g["grad_fn"]) == k), 0)
                pts.append((c["step"], float(n)))
            g = growth(pts)
            if _leaking(g, 1.0, 3 * max(1.0, g["late_slope"] if g else 1.0)) and (best is None or
                                                                                   g["late_slope"] > best[1]["late_slope"]):
                best = (k, g)
        if best:
            hits[r] = best
    if not hits or "memleak.autograd-graph" in seen and all(h[0][3] for h in hits.values()):
        return []
    hr = sorted(hits)
    k, g = hits[hr[0]]
    locs = []
    for r in hr:
        key = hits[r][0]
        h = (census[r][-1].get("group_holders") or {}).get(f"{list(key[0])}|{key[1]}|{key[2]}|{key[3]}")
        if h:
            locs.append(Location(r, h["file"], int(h["line"]), h.get("func", ""), f"holds them: {h['name']}"))
    return [Finding("memleak.tensors", "error",
                    f"live {k[2]} tensors of shape {list(k[0])} ({k[1]}) grow by {_mb(g['late_slope'])} per step "
                    f"{_who(hr, ranks)}",
                    "Something keeps a reference per step (a list, a dict, a cache without a bound): drop it, "
                    "bound it, or store detached CPU copies.", tuple(hr), tuple(locs),
                    {"group": {"shape": list(k[0]), "dtype": k[1], "device": k[2]}, "bytes_per_step": g["late_slope"]})]


def _layers(census: dict[int, list], steps: dict[int, list], ranks: list[int], seen: set[str]) -> list[Finding]:
    out = []
    if seen:
        return out  # the cause is already named; the layers would repeat it
    specs = [
        ("memleak.cuda", "CUDA allocator (allocated bytes)", lambda r: [(s["step"], float(s["cuda_allocated"]))
                                                                        for s in steps[r] if "cuda_allocated" in s],
         "cuda"),
        ("memleak.dataloader-workers", "DataLoader worker processes (RSS)",
         lambda r: [(c["step"], float(sum((c.get("workers") or {}).values()))) for c in census.get(r, [])], "host"),
        ("memleak.python-objects", "Python objects (count)",
         lambda r: [(c["step"], float(c.get("objects", 0))) for c in census.get(r, [])], "objects"),
        ("memleak.rss", "process RSS not explained by live tensors (native memory)",
         lambda r: [(s["step"], float(s.get("rss", 0))) for s in steps[r]], "host"),
    ]
    for fid, layer, series, unit in specs:
        hits = {}
        for r in ranks:
            g = growth(series(r))
            thr = (20.0, 200.0) if unit == "objects" else (64 * 1024.0, 8 * 2**20)
            if _leaking(g, *thr):
                hits[r] = g
        if not hits:
            continue
        hr = sorted(hits)
        per = median(g["late_slope"] for g in hits.values())
        amount = f"{per:.0f} objects" if unit == "objects" else _mb(per)
        proj = "" if unit == "objects" else _project(steps[hr[0]], census.get(hr[0], []), per, unit)
        out.append(Finding(fid, "error", f"{layer} grows by {amount} per step {_who(hr, ranks)}{proj}",
                           "Look at what the loop keeps per step in that layer; `ddpdoctor analyze` shows the census.",
                           tuple(hr), (), {"per_step": per}))
        break  # the first (most specific) layer that grows
    return out
