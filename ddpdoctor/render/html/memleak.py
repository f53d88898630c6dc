"""The memory part of the HTML report: memory per rank per step (the SVG charts of ``render.svg``),
DataLoader workers' USS, autograd graph nodes and the growing tensor groups over the censuses, and the holders with their line.
Past a few ranks the charts show the culprits one by one and the other ranks as median and max."""

from __future__ import annotations

import statistics
from typing import Any

from ddpdoctor.analysis.findings import Report
from ddpdoctor.record import schema
from ddpdoctor.render.html.parts import Sources, culprits_of, e, fmt_bytes, group_ranks, ranks_label, short, table
from ddpdoctor.render.svg import line_chart

PER_RANK = 8  # up to this many ranks, one series (one column) per rank


def _series(
    per_rank: dict[int, list[tuple[float, float]]], culprits: set[int], what: str
) -> dict[str, list[tuple[float, float]]]:
    per_rank = {r: s for r, s in per_rank.items() if s}
    if len(per_rank) <= PER_RANK:
        return {f"rank {r}{' (culprit)' if r in culprits else ''} {what}": s for r, s in per_rank.items()}
    out = {f"rank {r} (culprit) {what}": per_rank[r] for r in sorted(culprits & set(per_rank))[:4]}
    others = [r for r in per_rank if r not in culprits] or list(per_rank)
    by_step: dict[float, list[float]] = {}
    for r in others:
        for x, y in per_rank[r]:
            by_step.setdefault(x, []).append(y)
    steps = sorted(by_step)
    label = ranks_label(others)
    out[f"{label}: median"] = [(x, statistics.median(by_step[x])) for x in steps]
    out[f"{label}: max"] = [(x, max(by_step[x])) for x in steps]
    return out


def section(report: Report, record: Any, src: Sources) -> str:
    if not any(r.memory for r in record.ranks.values()):
        return ""
    culprits = {r for f in report.findings if f.id.startswith("memleak.") for r in f.culprits}
    mem = {r: [x for x in rec.memory if x.get("kind") == schema.K_MEM] for r, rec in record.ranks.items()}
    rss = {r: [(float(x["step"]), float(x.get("rss", 0))) for x in m if "step" in x] for r, m in mem.items()}
    out = [
        '<section id="memory"><h2>Memory</h2>',
        '<div class="chart">',
        line_chart("Process RSS per rank (MiB) by step", _series(rss, culprits, "RSS"), "MiB", 900),
        "</div>",
    ]
    cuda = {
        r: [(float(x["step"]), float(x["cuda_allocated"])) for x in m if "cuda_allocated" in x] for r, m in mem.items()
    }
    if any(cuda.values()):
        out += [
            '<div class="chart">',
            line_chart("CUDA allocated per rank (MiB) by step", _series(cuda, culprits, "CUDA"), "MiB", 900),
            "</div>",
        ]
    uss = _worker_uss(record, culprits)
    if uss:
        out += [
            '<div class="chart">',
            line_chart("DataLoader workers' private memory (USS, MiB) by step", uss, "MiB", 900),
            "</div>",
        ]
    censuses = {r: [x for x in rec.memory if x.get("kind") == schema.K_CENSUS] for r, rec in record.ranks.items()}
    nodes = {
        r: [(float(c["step"]), float(c.get("graph_nodes", 0))) for c in cs if not c.get("final") and "step" in c]
        for r, cs in censuses.items()
    }
    if len({x for s in nodes.values() for x, _y in s}) >= 3:
        out += [
            '<div class="chart">',
            line_chart(
                "Autograd graph nodes reachable from live tensors, by census step",
                _series(nodes, culprits, "nodes"),
                "nodes",
                900,
            ),
            "</div>",
        ]
    if any(censuses.values()):
        out.append(_census_table(censuses, culprits))
        out.append(_groups(censuses, culprits))
    out.append(_holders(report, src))
    out.append("</section>")
    return "".join(out)


def _worker_uss(record: Any, culprits: set[int]) -> dict[str, list[tuple[float, float]]]:
    """USS of each DataLoader worker by the rank's step at the sample (``worker_mem``): the culprit ranks'
    workers first, at most ``PER_RANK`` series."""
    per: dict[tuple, list[tuple[float, float]]] = {}
    for r, rec in record.ranks.items():
        for x in rec.memory:
            if x.get("kind") == schema.K_WORKER_MEM:
                for w in x.get("w") or ():
                    key = (r not in culprits, r, w.get("pid"), w.get("id", 0))
                    per.setdefault(key, []).append((float(x.get("step", 0)), float(w.get("uss") or 0)))
    return {
        f"rank {r} worker {wid} (pid {pid})": sorted(pts)
        for (_c, r, pid, wid), pts in sorted(per.items(), key=lambda kv: kv[0][:2])[:PER_RANK]
    }


def _census_table(censuses: dict[int, list[dict]], culprits: set[int]) -> str:
    """Graph nodes / live tensors / objects at each census step; ranks with the same figures share a column."""
    few = len(censuses) <= PER_RANK  # one column per rank; past that, ranks with the same figures share one
    cols = {
        r: r if few else tuple((c.get("step"), c.get("graph_nodes"), c.get("tensors"), c.get("why")) for c in cs)
        for r, cs in censuses.items()
        if cs
    }
    groups = group_ranks(cols, culprits)
    if len(groups) > PER_RANK:  # many different ranks: the culprits, then the median of the rest
        keep = [g for g in groups if set(g[1]) & culprits][:4]
        groups = keep + [g for g in groups if g not in keep][: PER_RANK - len(keep)]
    steps = sorted({int(c["step"]) for cs in censuses.values() for c in cs if c.get("step") is not None})
    head = ["census at step"] + [ranks_label(rs) + (" (culprit)" if set(rs) & culprits else "") for _k, rs in groups]
    rows = []
    for s in steps:
        row = [str(e(s))]
        for _k, rs in groups:
            c = next((c for c in censuses[rs[0]] if c.get("step") == s), None)
            row.append(
                ""
                if c is None
                else f"{e(c.get('graph_nodes', 0))} graph nodes · {e(c.get('tensors', 0))} tensors · "
                f'{e(c.get("objects", "?"))} objects <span class="small">({e(c.get("why", ""))})</span>'
            )
        rows.append(row)
    return "<h3>Censuses: autograd graph nodes, live tensors, Python objects</h3>" + table(head, rows)


def _gkey(g: dict) -> str:
    return f"{list(g.get('shape') or [])} {g.get('dtype')} {g.get('device')}{' grad_fn' if g.get('grad_fn') else ''}"


def _groups(censuses: dict[int, list[dict]], culprits: set[int]) -> str:
    """Tensor groups (shape, dtype, device, grad_fn) whose count grew from the first census to the last
    one that is not the final one (function locals are gone by then), and still grew in the second half
    (a warm-up that allocates gradients once is not growth)."""
    growth: dict[int, list[tuple]] = {}
    for r, cs in censuses.items():
        cs = [c for c in cs if not c.get("final")] or cs
        if len(cs) < 2:
            continue
        first = {_gkey(g): g for g in cs[0].get("groups") or ()}
        mid = {_gkey(g): g for g in cs[len(cs) // 2].get("groups") or ()} if len(cs) > 2 else {}
        last = cs[-1]
        rows = []
        for g in last.get("groups") or ():
            k = _gkey(g)
            n0 = int((first.get(k) or {}).get("count", 0))
            if int(g.get("count", 0)) > n0 and (
                not mid or int(g.get("count", 0)) > int((mid.get(k) or {}).get("count", 0))
            ):
                hk = "|".join(
                    [
                        str(list(g.get("shape") or [])).replace(" ", ""),
                        str(g.get("dtype")),
                        str(g.get("device")),
                        str(bool(g.get("grad_fn"))),
                    ]
                )
                h = (last.get("group_holders") or {}).get(hk) or {}
                rows.append(
                    (
                        k,
                        n0,
                        int(g.get("count", 0)),
                        int(g.get("bytes", 0)),
                        cs[0].get("step"),
                        last.get("step"),
                        h.get("name"),
                        tuple(h.get("file") and (h["file"], h.get("line")) or ()),
                    )
                )
        growth[r] = sorted(rows, key=lambda t: -(t[2] - t[1]))[:8]
    if not any(growth.values()):
        return "<h3>Growing tensor groups</h3><p>No tensor group grew between the censuses.</p>"
    out = ["<h3>Growing tensor groups (first census to last)</h3>"]
    for rows, ranks in group_ranks({r: tuple(v) for r, v in growth.items() if v}, culprits):
        body = [
            [
                f"<code>{e(k)}</code>",
                f"{e(n0)} &#8594; {e(n1)} (steps {e(s0)} &#8594; {e(s1)})",
                e(fmt_bytes(b)),
                (f"<code>{e(name)}</code>" if name else "")
                + (f' at <code title="{e(at[0])}">{e(short(at[0]))}:{e(at[1])}</code>' if at else ""),
            ]
            for k, n0, n1, b, s0, s1, name, at in rows
        ]
        out.append(
            f"<p><b>{e(ranks_label(ranks))}</b></p>"
            + table(["group (shape dtype device)", "count", "bytes now", "held by"], body)
        )
    return "".join(out)


def _holders(report: Report, src: Sources) -> str:
    """Who holds the growing memory, as the code writes it, and the line that stores into it."""
    holders: dict[int, tuple] = {}
    for f in report.findings:
        for r, h in ((f.evidence or {}).get("holders") or {}).items():
            if isinstance(h, dict) and h.get("file"):
                holders[int(r)] = (
                    h.get("name") or h.get("path") or "?",
                    h["file"],
                    int(h.get("line") or 0),
                    h.get("func") or "",
                    h.get("path") or "",
                )
    if not holders:
        return ""
    culprits = culprits_of(report)
    rows = []
    for (name, file, line, func, path), ranks in group_ranks(holders, culprits):
        text = src.line(file, line)
        rows.append(
            [
                e(ranks_label(ranks)) + (' <span class="culprit">culprit</span>' if set(ranks) & culprits else ""),
                f"<code>{e(name)}</code>"
                + (f' <span class="small">({e(path)})</span>' if path and path != name else ""),
                f'<code title="{e(file)}">{e(short(file))}:{e(line)}</code>{" in " + e(func) if func else ""}',
                f"<code>{e(text)}</code>" if text else '<span class="nosrc">source not available</span>',
            ]
        )
    return "<h3>Holders</h3>" + table(["ranks", "held by", "stored at", "line"], rows)
