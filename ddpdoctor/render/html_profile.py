"""The profile part of the HTML report: per-rank stacked bars of the step phases (steady-state medians
from ``profile.summary``), the straggler marked, and the Perfetto trace linked. Past a few ranks: the
culprits, the slowest ranks, and the median of the rest."""

from __future__ import annotations

import os
import statistics
from typing import Any

from ddpdoctor.analysis.model import Report
from ddpdoctor.render.html_parts import Sources, e, ranks_label

PHASES = [("data", "#8c564b"), ("forward", "#1f77b4"), ("backward+comm", "#ff7f0e"), ("optimizer", "#2ca02c"),
          ("collective", "#9467bd"), ("other", "#7f7f7f")]
MAX_BARS = 12


def _bars(rows: list[tuple[str, dict[str, float], bool]]) -> str:
    left, right, bar_h, gap, width = 190, 90, 18, 8, 900
    top = 10
    scale_max = max([sum(float(m.get(p, 0) or 0) for p, _c in PHASES) for _l, m, _s in rows] + [1e-9])
    pw = width - left - right
    height = top + len(rows) * (bar_h + gap) + 24
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-size="12" '
           f'role="img" aria-label="step phases per rank">']
    for i, (label, m, slow) in enumerate(rows):
        y = top + i * (bar_h + gap)
        color = "#b3261e" if slow else "#1f2328"
        weight = ' font-weight="bold"' if slow else ""
        out.append(f'<text x="{left - 8}" y="{y + bar_h - 5}" text-anchor="end" fill="{color}"{weight}>'
                   f'{e(label)}</text>')
        x = float(left)
        for phase, c in PHASES:
            v = float(m.get(phase, 0) or 0)
            w = v / scale_max * pw
            if w > 0.2:
                out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{c}">'
                           f'<title>{e(label)}: {e(phase)} {v:.1f} ms</title></rect>')
            x += w
        total = sum(float(m.get(p, 0) or 0) for p, _c in PHASES)
        out.append(f'<text x="{x + 6:.1f}" y="{y + bar_h - 5}">{total:.1f} ms</text>')
        if slow:
            out.append(f'<rect x="{left - 2}" y="{y - 2}" width="{x - left + 4:.1f}" height="{bar_h + 4}" '
                       f'fill="none" stroke="#b3261e" stroke-width="2"/>')
    out.append("</svg>")
    legend = "".join(f'<span><i class="sw" style="background:{c}"></i>{e(p)}</span>' for p, c in PHASES)
    return f'<div class="bar-legend">{legend}</div>' + "".join(out)


def section(report: Report, record: Any, src: Sources) -> str:
    summary = next((f for f in report.findings if f.id == "profile.summary"), None)
    medians = (summary.evidence or {}).get("median_ms") if summary else None
    trace = os.path.join(record.run_dir, "trace.json")
    has_trace = os.path.exists(trace) or any(r.timeline for r in record.ranks.values())
    if not medians and not has_trace:
        return ""
    slow = {r for f in report.findings if f.id == "profile.straggler" for r in f.culprits}
    out = ['<section id="profile"><h2>Where the step time goes</h2>']
    if medians:
        per = {int(r): m for r, m in medians.items() if isinstance(m, dict)}
        rows: list[tuple[str, dict[str, float], bool]] = []
        if len(per) <= MAX_BARS:
            rows = [(f"rank {r}{' (straggler)' if r in slow else ''}", m, r in slow) for r, m in sorted(per.items())]
        else:
            pick = sorted(slow & set(per))[:4]
            pick += [r for r in sorted(per, key=lambda r: -float(per[r].get("step", 0) or 0)) if r not in pick][
                :MAX_BARS - 1 - len(pick)]
            rows = [(f"rank {r}{' (straggler)' if r in slow else ''}", per[r], r in slow) for r in pick]
            rest = [r for r in per if r not in pick]
            med = {p: statistics.median(float(per[r].get(p, 0) or 0) for r in rest) for p, _c in PHASES}
            rows.append((f"median of {ranks_label(rest)}", med, False))
        out.append("<p>Median milliseconds per step in the steady state, by phase; the straggler is outlined.</p>")
        out.append(_bars(rows))
    if has_trace:
        out.append(f'<p>Timeline of every rank: <a href="trace.json">trace.json</a> in the run directory '
                   f'(<code>{e(trace)}</code>); open it in Perfetto (ui.perfetto.dev, "Open trace file"): the file '
                   f'stays on your machine.</p>')
    out.append("</section>")
    return "".join(out)
