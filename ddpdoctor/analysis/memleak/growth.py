"""Memory that grows step after step: on which rank, in which layer, and why. Pure.

A series is judged after a warm-up (the first 20 % of its samples, at least 3), with a Theil-Sen slope
(robust to the allocator's jumps) over the second half of the run: a cache that fills and then stays
flat has a flat second half and is not a leak.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from ddpdoctor.analysis.findings import Finding, Location, rank_list
from ddpdoctor.analysis.ids import (
    MEMLEAK_AUTOGRAD_GRAPH,
    MEMLEAK_DATALOADER_WORKERS,
    MEMLEAK_PYTHON_OBJECTS,
    MEMLEAK_RSS,
    MEMLEAK_TENSORS,
)
from ddpdoctor.analysis.memleak import evidence as mev
from ddpdoctor.analysis.series import growth
from ddpdoctor.record.reader import RunRecord


def graphs(
    census: dict[int, list], ranks: list[int], steps: dict[int, list], record: RunRecord | None = None
) -> list[Finding]:
    """Autograd graphs kept alive: from the dense scan of the user's variables (every few steps), else
    from the censuses of all live tensors."""
    hits, found = {}, {}
    for r in ranks:
        dense = [(s["step"], float(s["local_graph"])) for s in steps.get(r, []) if "local_graph" in s]
        sparse = [(c["step"], float(c.get("graph_nodes", 0))) for c in census.get(r, [])]
        for how, pts in (("dense", dense), ("census", sparse)):
            g = growth(pts)
            if g is not None and mev.leaking(g, 0.5, 5, count=True):
                hits[r] = g
                found[r] = how
                break
    if not hits:
        return []
    series = {
        r: [
            [(s["step"], float(s["local_graph"])) for s in steps.get(r, []) if "local_graph" in s],
            [(c["step"], float(c.get("graph_nodes", 0))) for c in census.get(r, [])],
        ]
        for r in ranks
    }
    hr, unknown = mev.rank_set(hits, series, ranks)
    for r in hr:
        found.setdefault(r, "dense" if any("local_graph" in s for s in steps.get(r, [])) else "census")
    locs, holders = [], {}
    for r in hr:
        h = _graph_holder(census.get(r, []), steps.get(r, []), found[r] == "dense")
        if h:
            holders[r] = h
            locs.append(Location(r, h["file"], int(h["line"]), h.get("func", ""), "stores"))
    per = median(g["late_slope"] for g in hits.values())
    # the points figures.py takes: a memory line without RSS is no point at 0
    rss = [
        growth([(s["step"], float(s["rss"])) for s in steps[r] if "rss" in s and s.get("step") is not None]) for r in hr
    ]
    # the later half's slope, as every growth figure (figures.py, compare) and the judgement use
    rss_slope = median(g["late_slope"] for g in rss if g) if any(rss) else 0.0
    h0 = next(iter(holders.values()), {})
    name = h0.get("name", "")
    stored = bool(h0.get("container")) if h0 else False
    cause = (
        "tensors stored with their autograd graph"
        if stored
        else "a tensor accumulated across steps with its autograd graph (e.g. `total += loss`)"
    )
    held = f" in {mev.held(h0)}" if name and h0.get("file") else ""
    msg = (
        f"autograd graph grows by {per:.1f} nodes per step {mev.who(hr, ranks, unknown)}: {cause}{held}; "
        f"RSS {'+' + mev.mb(rss_slope) + '/step' if rss_slope > 0 else 'barely moves'}"
        + mev.project(steps[hr[0]], census.get(hr[0], []), rss_slope, "host")
    )
    # a rank without its holder because the search could not be afforded says so (never a silent gap)
    gap, gaps = mev.skipped_note("holder search", record, [r for r in hr if r not in holders])
    msg += gap
    what = f"`{name}`" if name else "the container"
    hint = (
        f"Store `x.detach()` (or `x.item()` for a number) in {what}, not the tensor itself: each stored "
        "tensor keeps its step's graph and activations alive."
        if stored
        else "Accumulate `loss.item()` or `loss.detach()`, not `loss`: each step's graph stays alive otherwise."
    )
    return [
        Finding(
            MEMLEAK_AUTOGRAD_GRAPH,
            "error",
            msg,
            hint,
            tuple(hr),
            tuple(locs),
            {
                "nodes_per_step": per,
                "rss_bytes_per_step": rss_slope,
                "ranks_growing": hr,
                "ranks_unknown": unknown,
                "holders": {str(r): h for r, h in holders.items()},
                **({"holder_search_skipped": gaps} if gaps else {}),
            },
            culprits=tuple(hr),
        )
    ]


def _graph_holder(census: list[dict[str, Any]], steps: list[dict[str, Any]], dense: bool) -> dict[str, Any] | None:
    """Who holds the growing graph on one rank: when the scan of the user's names saw the growth, the
    holder of most of the nodes in the last scan; else the holder of the biggest graph in the last census
    that names one."""
    last = next((s for s in reversed(steps) if s.get("local_holder")), None)
    if (
        dense
        and last
        and last["local_holder"].get("file")
        and last["local_holder"].get("nodes", 0) * 2 >= last.get("local_graph", 0)
    ):
        return last["local_holder"]
    # found from the growth upwards: the holder most old members of a growing graph-carrying group share
    for c in reversed(census):
        h = next((g["holder"] for g in c.get("grown") or () if g.get("holder") and g["group"].endswith("|True")), None)
        if h:
            return h
    for c in reversed(census):
        h = next((b.get("holder") for b in c.get("biggest_graphs", []) if b.get("holder")), None)
        if h:
            return h
        h = next((v for k, v in (c.get("group_holders") or {}).items() if k.endswith("|True")), None)
        if h:
            return h
    return None


def tensor_groups(
    census: dict[int, list], ranks: list[int], seen: set[str], record: RunRecord | None = None
) -> list[Finding]:
    """Live tensors of one kind (shape, dtype, device) whose number keeps growing."""
    hits: dict[int, tuple] = {}
    for r in ranks:
        cs = census.get(r, [])
        keys = {(tuple(g["shape"]), g["dtype"], g["device"], g["grad_fn"]) for c in cs for g in c.get("groups", [])}
        best = None
        for k in keys:
            pts = []
            for c in cs:
                n = next(
                    (
                        g["bytes"]
                        for g in c.get("groups", [])
                        if (tuple(g["shape"]), g["dtype"], g["device"], g["grad_fn"]) == k
                    ),
                    0,
                )
                pts.append((c["step"], float(n)))
            g = growth(pts)
            if (
                g is not None
                and mev.leaking(g, 8.0, max(64 * 1024.0, 3 * g["late_slope"]), count=True)
                and (best is None or g["late_slope"] > best[1]["late_slope"])
            ):
                best = (k, g)
        if best:
            hits[r] = best
    if not hits or MEMLEAK_AUTOGRAD_GRAPH in seen and all(h[0][3] for h in hits.values()):
        return []
    k, g = hits[min(hits)]

    def group_series(r: int) -> list[tuple[float, float]]:
        return [
            (
                c["step"],
                float(
                    next(
                        (
                            x["bytes"]
                            for x in c.get("groups", [])
                            if (tuple(x["shape"]), x["dtype"], x["device"], x["grad_fn"]) == k
                        ),
                        0,
                    )
                ),
            )
            for c in census.get(r, [])
        ]

    hr, unknown = mev.rank_set({r: h[1] for r, h in hits.items()}, {r: [group_series(r)] for r in ranks}, ranks)
    for r in hr:
        hits.setdefault(r, (k, g))
    locs, holders = [], {}
    for r in hr:
        key = hits[r][0]
        name = f"{list(key[0])}|{key[1]}|{key[2]}|{key[3]}"
        grown = (e.get("holder") for c in reversed(census[r]) for e in c.get("grown") or () if e["group"] == name)
        h = next((x for x in grown if x), None) or (census[r][-1].get("group_holders") or {}).get(name)
        if h and h.get("file"):
            holders[r] = h
            locs.append(Location(r, h["file"], int(h["line"]), h.get("func", ""), "stores"))
    h0 = next(iter(holders.values()), None)
    held = f", held by {mev.held(h0)}" if h0 else ""
    gap, gaps = mev.skipped_note("holder search", record, [r for r in hr if r not in holders])
    return [
        Finding(
            MEMLEAK_TENSORS,
            "error",
            f"live {k[2]} tensors of shape {list(k[0])} ({k[1]}) grow by {mev.mb(g['late_slope'])} per step "
            f"{mev.who(hr, ranks, unknown)}{held}{gap}",
            "Something keeps a reference per step (a list, a dict, a cache without a bound): drop it, "
            "bound it, or store detached CPU copies.",
            tuple(hr),
            tuple(locs),
            {
                "group": {"shape": list(k[0]), "dtype": k[1], "device": k[2]},
                "bytes_per_step": g["late_slope"],
                "holders": {str(r): h for r, h in holders.items()},
                **({"holder_search_skipped": gaps} if gaps else {}),
            },
            culprits=tuple(hr),
        )
    ]


def layers(
    census: dict[int, list],
    steps: dict[int, list],
    ranks: list[int],
    seen: set[str],
    record: RunRecord | None = None,
) -> list[Finding]:
    out: list[Finding] = []
    if seen:
        return out  # the cause is already named; the layers would repeat it
    specs = [
        (
            MEMLEAK_DATALOADER_WORKERS,
            "DataLoader worker processes (RSS)",
            lambda r: [(c["step"], float(sum((c.get("workers") or {}).values()))) for c in census.get(r, [])],
            "host",
        ),
        (
            MEMLEAK_PYTHON_OBJECTS,
            "Python objects (count)",
            lambda r: [(c["step"], float(c.get("objects", 0))) for c in census.get(r, [])],
            "objects",
        ),
        (MEMLEAK_RSS, "process RSS", lambda r: [(s["step"], float(s.get("rss", 0))) for s in steps[r]], "host"),
    ]
    for fid, layer, series, unit in specs:
        hits: dict[int, dict[str, float]] = {}
        for r in ranks:
            g = growth(series(r))
            thr = (20.0, 200.0) if unit == "objects" else (64 * 1024.0, 8 * 2**20)
            if g is not None and mev.leaking(g, *thr):
                hits[r] = g
        if not hits:
            continue
        hr, unknown = mev.rank_set(hits, {r: [series(r)] for r in ranks}, ranks)
        for r in hr:
            if r not in hits and (extra := growth(series(r))) is not None:
                hits[r] = extra
        per = median(g["late_slope"] for g in hits.values())
        amount = f"{per:.0f} objects" if unit == "objects" else mev.mb(per)
        proj = "" if unit == "objects" else mev.project(steps[hr[0]], census.get(hr[0], []), per, unit)
        msg = f"{layer} grows by {amount} per step {mev.who(hr, ranks, unknown)}{proj}"
        hint = "Look at what the loop keeps per step in that layer; `ddpdoctor analyze` shows the census."
        ev: dict[str, Any] = {"per_step": per}
        if fid == MEMLEAK_RSS:
            msg, hint, ev = _rss_cause(msg, census, hits, ev, record)
        out.append(Finding(fid, "error", msg, hint, tuple(hr), (), ev, culprits=tuple(hr)))
        break  # the first (most specific) layer that grows
    return out


def _rss_cause(
    msg: str, census: dict[int, list], hits: dict[int, dict], ev: dict[str, Any], record: RunRecord | None = None
) -> tuple:
    """Native memory only when censuses covered the growth and saw nothing grow; otherwise say that the
    census could not explain it, and how to make it cover the growth."""
    covered: list[tuple] = []
    few: list[tuple] = []
    for r, g in hits.items():
        lo, hi = g["first_step"], g["last_step"]
        cs = [c for c in census.get(r, []) if lo <= c["step"] <= hi]
        span = (cs[-1]["step"] - cs[0]["step"]) if cs else 0
        (covered if len(cs) >= 3 and span * 2 >= hi - lo else few).append((r, len(cs), lo, hi))
    ev = dict(ev, censuses_in_growth={str(r): n for r, n, _lo, _hi in covered + few})
    if not few:
        n = min(c[1] for c in covered)
        visible: dict[str, list[int]] = {}
        for r, _n, lo, hi in covered:
            cs = [c for c in census.get(r, []) if lo <= c["step"] <= hi]
            for what, value in (
                ("autograd graph nodes", lambda c: c.get("graph_nodes", 0)),
                ("live tensors", lambda c: c.get("tensors", 0)),
                ("live tensor bytes", lambda c: sum((c.get("tensor_bytes") or {}).values())),
                ("Python objects", lambda c: c.get("objects", 0)),
            ):
                rise = growth([(c["step"], float(value(c))) for c in cs])
                # any sustained rise counts: what the census can see must be ruled out before "native"
                if rise and rise["late_slope"] > 0 and rise["late_total"] > 0 and rise["up_fraction"] >= 0.5:
                    visible.setdefault(what, []).append(r)
        if visible:
            seen = "; ".join(f"{what} on rank(s) {rank_list(rs)}" for what, rs in visible.items())
            cause = (
                "graphs"
                if "autograd graph nodes" in visible
                else "tensors"
                if any("tensor" in w for w in visible)
                else "objects"
            )
            return (
                msg + f"; what the censuses see grows with it ({n}+ censuses during the growth): {seen}. "
                "Not native memory",
                "The census groups and holders in the run directory (memory.jsonl) show what the loop keeps per "
                "step; `--census-every N` takes more censuses (each names the holders of what grew).",
                dict(ev, cause=cause, visible=visible),
            )
        return (
            msg + f": not explained by live tensors, autograd graphs or Python objects ({n}+ censuses "
            "during the growth saw none grow): native memory (a C extension, allocator fragmentation, "
            "pinned memory)",
            "Look for native allocations per step (C extensions, pinned memory, a growing allocator "
            "pool); `MALLOC_ARENA_MAX=2` rules out glibc arena fragmentation.",
            dict(ev, cause="native"),
        )
    r, n, lo, hi = min(few, key=lambda x: x[1])
    every = max(1, int((hi - lo) // 10))
    gap, gaps = mev.skipped_note("census", record, [x[0] for x in few])
    if gaps:
        ev = dict(ev, census_skipped=gaps)
    return (
        msg + f"; the census could not explain it: too few censuses during the growth on rank {r} "
        f"({n} between steps {int(lo)} and {int(hi)}){gap}",
        f"Rerun with `--census-every {every}` so that censuses of live tensors and graphs cover the growth.",
        dict(ev, cause="unknown"),
    )
