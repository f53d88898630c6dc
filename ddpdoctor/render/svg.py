"""A picture of memory per rank per step: one self-contained SVG, no plotting library. Pure."""

from __future__ import annotations

from html import escape

from ddpdoctor.record import schema

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def line_chart(
    title: str, series: dict[str, list[tuple[float, float]]], unit: str, width: int = 720, height: int = 300
) -> str:
    """``series``: label -> [(step, value)]. Values are scaled by ``unit`` ("MiB" or "")."""
    left, right, top, bottom = 70, 150, 30, 40
    pts = [p for s in series.values() for p in s]
    if not pts:
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="60"><text x="10" y="30">'
            f"{escape(title)}: no data</text></svg>"
        )
    scale = 2**20 if unit == "MiB" else 1.0
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts) / scale, max(p[1] for p in pts) / scale
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + 1
    pad = (y1 - y0) * 0.05
    # memory and counts are magnitudes: their axis starts at 0, never below it
    y0, y1 = (0.0 if y0 >= 0 else y0 - pad), y1 + pad
    pw, ph = width - left - right, height - top - bottom

    def X(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def Y(y: float) -> float:
        return top + ph - (y - y0) / (y1 - y0) * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        f'font-size="11">',
        f'<text x="{left}" y="18" font-size="13">{escape(title)}</text>',
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>',
    ]
    for i in range(5):
        yv = y0 + (y1 - y0) * i / 4
        out.append(f'<text x="{left - 6}" y="{Y(yv) + 4:.1f}" text-anchor="end">{yv:.1f}</text>')
        xv = x0 + (x1 - x0) * i / 4
        out.append(f'<text x="{X(xv):.1f}" y="{top + ph + 16}" text-anchor="middle">{xv:.0f}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 6}" text-anchor="middle">step</text>')
    out.append(
        f'<text x="14" y="{top + ph / 2}" transform="rotate(-90 14 {top + ph / 2})" '
        f'text-anchor="middle">{escape(unit)}</text>'
    )
    for i, (label, s) in enumerate(series.items()):
        c = COLORS[i % len(COLORS)]
        path = " ".join(f"{X(x):.1f},{Y(y / scale):.1f}" for x, y in s)
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{path}"/>')
        out.append(f'<text x="{left + pw + 10}" y="{top + 14 + 16 * i}" fill="{c}">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def memory_svg(record) -> str:  # type: ignore[no-untyped-def]
    """RSS per rank per step and, from the censuses, autograd graph nodes per rank."""
    rss = {
        f"rank {r} RSS": [(e["step"], float(e.get("rss", 0))) for e in rec.memory if e.get("kind") == schema.K_MEM]
        for r, rec in record.ranks.items()
    }
    cuda = {
        f"rank {r} CUDA alloc": [
            (e["step"], float(e["cuda_allocated"]))
            for e in rec.memory
            if e.get("kind") == schema.K_MEM and "cuda_allocated" in e
        ]
        for r, rec in record.ranks.items()
    }
    nodes = {
        f"rank {r} graph nodes": [
            (e["step"], float(e.get("graph_nodes", 0))) for e in rec.memory if e.get("kind") == schema.K_CENSUS
        ]
        for r, rec in record.ranks.items()
    }
    charts = [line_chart("Process RSS per rank", rss, "MiB")]
    if any(cuda.values()):
        charts.append(line_chart("CUDA allocated per rank", cuda, "MiB"))
    charts.append(line_chart("Autograd graph nodes reachable from live tensors", nodes, "nodes"))
    h = sum(int(c.split('height="', 1)[1].split('"', 1)[0]) for c in charts)
    body = []
    y = 0
    for c in charts:
        body.append(f'<g transform="translate(0,{y})">{c}</g>')
        y += int(c.split('height="', 1)[1].split('"', 1)[0])
    return f'<svg xmlns="http://www.w3.org/2000/svg" width="720" height="{h}">' + "".join(body) + "</svg>\n"
