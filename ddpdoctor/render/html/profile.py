"""The profile part of the HTML report: per-rank stacked bars of the step phases (the typical steady step
from ``profile.summary``), the straggler marked; a timeline of a few consecutive steady-state steps per
rank (one lane each, the phases' ranges coloured, the same steps for every rank, aligned at the first
one's start); and the Perfetto trace linked. Past a few ranks both pictures show the stragglers, the
slowest, the median and the fastest rank (the bars add the median of the rest)."""

from __future__ import annotations

import os
import statistics
from typing import Any

from ddpdoctor.analysis.findings import Report
from ddpdoctor.analysis.ids import PROFILE_STRAGGLER, PROFILE_SUMMARY
from ddpdoctor.record import schema
from ddpdoctor.render.html.parts import Sources, e, fmt_bytes, ranks_label

PHASES = [
    ("data", "#8c564b"),
    ("forward", "#1f77b4"),
    ("backward+comm", "#ff7f0e"),
    ("optimizer", "#2ca02c"),
    ("collective", "#9467bd"),
    ("other", "#7f7f7f"),
]
MAX_BARS = 12
MAX_LANES = 8  # up to this many ranks: a lane each; beyond: stragglers, slowest, median, fastest
TIMELINE_STEPS = 4  # consecutive steps drawn, from the middle of the steady state
# the timeline's ranges: range name -> (what it shows, colour); the DDP bucket all-reduces (comm) run
# inside backward on another thread: they are drawn on a thinner strip under the lane
LANE = {
    "dataloader wait": ("data", "#8c564b"),
    "forward": ("forward", "#1f77b4"),
    "backward": ("backward", "#ff7f0e"),
    "optimizer step": ("optimizer", "#2ca02c"),
}
COMM = ("comm", "#9467bd")


EXPOSED = "#d62728"  # the part of backward+comm that is all-reduce after the backward compute ended
LOST = [  # profile --scaling: the parts of the lost step time (analysis/profile/scaling.py LOST_PARTS)
    ("exposed communication", EXPOSED),
    ("waiting for a slower rank", "#e377c2"),
    ("data wait", "#8c564b"),
    ("rest", "#bcbd22"),
]


def _bars(rows: list[tuple[str, dict[str, float], bool]], exposed: dict[str, float] | None = None) -> str:
    left, right, bar_h, gap, width = 190, 90, 18, 8, 900
    top = 10
    scale_max = max([sum(float(m.get(p, 0) or 0) for p, _c in PHASES) for _l, m, _s in rows] + [1e-9])
    pw = width - left - right
    height = top + len(rows) * (bar_h + gap) + 24
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-size="12" '
        f'role="img" aria-label="step phases per rank">'
    ]
    for i, (label, m, slow) in enumerate(rows):
        y = top + i * (bar_h + gap)
        color = "#b3261e" if slow else "#1f2328"
        weight = ' font-weight="bold"' if slow else ""
        out.append(
            f'<text x="{left - 8}" y="{y + bar_h - 5}" text-anchor="end" fill="{color}"{weight}>{e(label)}</text>'
        )
        x = float(left)
        for phase, c in PHASES:
            v = float(m.get(phase, 0) or 0)
            w = v / scale_max * pw
            if w > 0.2:
                out.append(
                    f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{c}">'
                    f"<title>{e(label)}: {e(phase)} {v:.1f} ms</title></rect>"
                )
            x += w
            xp = min(float((exposed or {}).get(label, 0.0)), v) / scale_max * pw
            if phase == "backward+comm" and xp > 0.2:  # its end: the all-reduce the backward did not hide
                out.append(
                    f'<rect x="{x - xp:.1f}" y="{y + bar_h // 2}" width="{xp:.1f}" height="{bar_h - bar_h // 2}" '
                    f'fill="{EXPOSED}"><title>{e(label)}: gradient all-reduce after the backward compute ended '
                    f"{float((exposed or {})[label]):.1f} ms</title></rect>"
                )
        total = sum(float(m.get(p, 0) or 0) for p, _c in PHASES)
        out.append(f'<text x="{x + 6:.1f}" y="{y + bar_h - 5}">{total:.1f} ms</text>')
        if slow:
            out.append(
                f'<rect x="{left - 2}" y="{y - 2}" width="{x - left + 4:.1f}" height="{bar_h + 4}" '
                f'fill="none" stroke="#b3261e" stroke-width="2"/>'
            )
    out.append("</svg>")
    shown = [*PHASES, ("exposed all-reduce (part of backward+comm)", EXPOSED)] if exposed else PHASES
    legend = "".join(f'<span><i class="sw" style="background:{c}"></i>{e(p)}</span>' for p, c in shown)
    return f'<div class="bar-legend">{legend}</div>' + "".join(out)


def _scaling(points: list[dict[str, Any]]) -> str:
    """profile --scaling: the speedup per world size against linear (left), and each world size's step as
    the smallest run's step plus the lost parts, stacked (right)."""
    pts = sorted((p for p in points if isinstance(p, dict)), key=lambda p: int(p.get("world_size") or 0))
    if len(pts) < 2:
        return ""
    w, h, pad = 360, 240, 44
    top_x = max(float(p["ideal"]) for p in pts)
    top_y = max(top_x, max(float(p["speedup"]) for p in pts))

    def xy(ideal: float, y: float) -> tuple[float, float]:
        return pad + (ideal - 1) / max(top_x - 1, 1e-9) * (w - 2 * pad), h - pad - y / top_y * (h - 2 * pad)

    x0, y0 = xy(float(pts[0]["ideal"]), float(pts[0]["ideal"]))
    x1, y1 = xy(top_x, top_x)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-size="12" role="img" '
        f'aria-label="scaling against linear">',
        f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="#656d76"/>',
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="#656d76"/>',
        f'<line x1="{x0:.1f}" y1="{y0:.1f}" x2="{x1:.1f}" y2="{y1:.1f}" stroke="#656d76" stroke-dasharray="4 3">'
        "<title>linear</title></line>",
        f'<text x="{x1 - 4:.1f}" y="{y1 - 6:.1f}" text-anchor="end" fill="#656d76">linear</text>',
    ]
    line = []
    for p in pts:
        x, y = xy(float(p["ideal"]), float(p["speedup"]))
        line.append(f"{x:.1f},{y:.1f}")
        n = int(p["world_size"])
        out.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="#1f77b4"><title>{n} ranks: {float(p["speedup"]):.2f}x '
            f"of {float(p['ideal']):g}x ({100 * float(p.get('efficiency') or 0):.0f} %)</title></circle>"
            f'<text x="{x:.1f}" y="{h - pad + 16}" text-anchor="middle">{n}</text>'
            f'<text x="{x + 6:.1f}" y="{y + 14:.1f}" fill="#1f77b4">{100 * float(p.get("efficiency") or 0):.0f} %</text>'
        )
    out.append(f'<polyline points="{" ".join(line)}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    out.append(f'<text x="{w / 2:.0f}" y="{h - 8}" text-anchor="middle" fill="#656d76">ranks</text>')
    out.append(f'<text x="12" y="{pad - 12}" fill="#656d76">speedup (throughput vs the smallest run)</text></svg>')
    # stacked steps: the smallest run's step scaled (what a perfect scaling keeps), then the lost parts
    bw, bh = 520, 26 * len(pts) + 30
    longest = max(float(p["step_ms"]) for p in pts) or 1.0
    bars = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{bw}" height="{bh}" font-size="12" role="img" '
        'aria-label="step time per world size: ideal and lost parts">'
    ]
    for i, p in enumerate(pts):
        y = 8 + i * 26
        lost = p.get("lost") or {}
        ideal = max(0.0, float(p["step_ms"]) - float(p.get("lost_ms") or 0.0))
        x = 80.0
        n = int(p["world_size"])
        bars.append(f'<text x="72" y="{y + 14}" text-anchor="end">{n} rank{"s" if n != 1 else ""}</text>')
        for name, c, v in [("as the smallest run", "#1f77b4", ideal)] + [
            (k, c, float(lost.get(k) or 0)) for k, c in LOST
        ]:
            wd = v / longest * (bw - 160)
            if wd > 0.2:
                bars.append(
                    f'<rect x="{x:.1f}" y="{y}" width="{wd:.1f}" height="18" fill="{c}"><title>{e(name)} '
                    f"{v:.1f} ms</title></rect>"
                )
            x += wd
        bars.append(f'<text x="{x + 6:.1f}" y="{y + 14}">{float(p["step_ms"]):.1f} ms</text>')
    bars.append("</svg>")
    legend = "".join(
        f'<span><i class="sw" style="background:{c}"></i>{e(n)}</span>'
        for n, c in [("step as the smallest run", "#1f77b4"), *LOST]
    )
    return (
        "<h3>Scaling (profile --scaling)</h3><p>Throughput against the smallest run, and linear; each world "
        "size's step: what the smallest run's pace gives, then the lost part split by the records.</p>"
        + "".join(out)
        + f'<div class="bar-legend">{legend}</div>'
        + "".join(bars)
    )


def _steps_of(timeline: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The rank's step ranges by step number (the range's payload; else their order)."""
    steps = sorted(
        (
            x
            for x in timeline
            if x.get("kind") == schema.K_RANGE
            and x.get("name") == "step"
            and isinstance(x.get("t0"), (int, float))
            and isinstance(x.get("t1"), (int, float))
        ),
        key=lambda x: x["t0"],
    )
    out: dict[int, dict[str, Any]] = {}
    for i, st in enumerate(steps):
        p = st.get("payload")
        out[p if isinstance(p, int) else i] = st
    return out


def _pick_steps(per_rank: dict[int, dict[int, dict[str, Any]]]) -> list[int]:
    """TIMELINE_STEPS consecutive step numbers every shown rank has, from the middle of the steady state
    (the first fifth of the steps, the warm-up, is left out as in profile.summary)."""
    common = sorted(set.intersection(*(set(s) for s in per_rank.values()))) if per_rank else []
    if not common:
        return []
    steady = common[max(1, len(common) // 5) :] if len(common) > max(1, len(common) // 5) + 1 else common
    runs: list[list[int]] = [[steady[0]]]
    for n in steady[1:]:
        if n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    run = max(runs, key=len)
    k = min(TIMELINE_STEPS, len(run))
    mid = len(run) // 2 - k // 2
    return run[mid : mid + k]


def _lanes(record: Any, slow: set[int], step_ms: dict[int, float]) -> list[tuple[int, str]]:
    """(rank, label) of the lanes: every rank up to MAX_LANES, else the stragglers, then the slowest, the
    median and the fastest rank by median step time."""
    ranks = sorted(r for r, rec in record.ranks.items() if rec.timeline)
    if len(ranks) <= MAX_LANES:
        return [(r, f"rank {r}" + (" (straggler)" if r in slow else "")) for r in ranks]
    out = [(r, f"rank {r} (straggler)") for r in sorted(slow & set(ranks))[: MAX_LANES - 3]]
    timed = sorted((r for r in ranks if r in step_ms), key=lambda r: (step_ms[r], r))
    if timed:
        for r, what in (
            (timed[-1], "slowest step"),
            (timed[len(timed) // 2], "median step"),
            (timed[0], "fastest step"),
        ):
            if r not in {x for x, _l in out}:
                out.append((r, f"rank {r} ({what})"))
    return out


def _timeline(record: Any, slow: set[int], step_ms: dict[int, float]) -> str:
    """An inline SVG: per shown rank one lane with the ranges of a few consecutive steady-state steps."""
    lanes = _lanes(record, slow, step_ms)
    per = {r: _steps_of(record.ranks[r].timeline) for r, _l in lanes}
    per = {r: s for r, s in per.items() if s}
    lanes = [(r, label) for r, label in lanes if r in per]
    picked = _pick_steps(per)
    if not lanes or not picked:
        return ""
    spans: dict[int, tuple[float, float]] = {}
    for r, _l in lanes:
        spans[r] = (float(per[r][picked[0]]["t0"]), float(per[r][picked[-1]]["t1"]))
    longest = max(b - a for a, b in spans.values()) or 1.0
    left, right, lane_h, comm_h, gap, width, top = 190, 20, 20, 6, 14, 900, 24
    pw = width - left - right
    height = top + len(lanes) * (lane_h + comm_h + gap) + 22

    def x_of(t: float, t0: float) -> float:
        return left + (t - t0) / longest * pw

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{width}" height="{height}" '
        f'font-size="12" role="img" aria-label="steps {picked[0]}-{picked[-1]} per rank" '
        f'data-steps="{",".join(map(str, picked))}">'
    ]
    for i, (r, label) in enumerate(lanes):
        t0, t1 = spans[r]
        y = top + i * (lane_h + comm_h + gap)
        is_slow = r in slow
        color = "#b3261e" if is_slow else "#1f2328"
        weight = ' font-weight="bold"' if is_slow else ""
        mark = ' data-straggler="1"' if is_slow else ""
        out.append(f'<g class="lane" data-rank="{r}"{mark}>')
        out.append(
            f'<text x="{left - 8}" y="{y + lane_h - 5}" text-anchor="end" fill="{color}"{weight}>{e(label)}</text>'
        )
        out.append(f'<rect x="{left}" y="{y}" width="{x_of(t1, t0) - left:.1f}" height="{lane_h}" fill="#eaeef2"/>')
        for x in record.ranks[r].timeline:
            if (
                x.get("kind") != schema.K_RANGE
                or not isinstance(x.get("t0"), (int, float))
                or not isinstance(x.get("t1"), (int, float))
                or x["t1"] <= t0
                or x["t0"] >= t1
            ):
                continue
            name = str(x.get("name", ""))
            if name in LANE:
                what, c = LANE[name]
                yy, hh = y, lane_h
            elif x.get("cat") == "comm":
                what, c = COMM
                yy, hh = y + lane_h + 1, comm_h
            else:
                continue
            a, b = x_of(max(float(x["t0"]), t0), t0), x_of(min(float(x["t1"]), t1), t0)
            ms = (float(x["t1"]) - float(x["t0"])) / 1e6
            out.append(
                f'<rect class="ph-{e(what)}" x="{a:.1f}" y="{yy}" width="{max(b - a, 0.5):.1f}" '
                f'height="{hh}" fill="{c}"><title>rank {r}: {e(name)} {ms:.1f} ms</title></rect>'
            )
        for n in picked:  # step boundaries
            st = per[r][n]
            sx = x_of(float(st["t0"]), t0)
            out.append(
                f'<line x1="{sx:.1f}" y1="{y - 3}" x2="{sx:.1f}" y2="{y + lane_h + comm_h + 2}" '
                f'stroke="#1f2328" stroke-width="1"><title>rank {r}: step {n} '
                f"{(float(st['t1']) - float(st['t0'])) / 1e6:.1f} ms</title></line>"
            )
            if i == 0:
                out.append(f'<text x="{sx + 3:.1f}" y="{top - 8}" fill="#656d76">step {n}</text>')
        if is_slow:
            out.append(
                f'<rect x="{left - 2}" y="{y - 2}" width="{x_of(t1, t0) - left + 4:.1f}" '
                f'height="{lane_h + comm_h + 5}" fill="none" stroke="#b3261e" stroke-width="2"/>'
            )
        out.append("</g>")
    out.append(
        f'<text x="{left}" y="{height - 6}" fill="#656d76">0 ms</text>'
        f'<text x="{width - right}" y="{height - 6}" text-anchor="end" fill="#656d76">'
        f"{longest / 1e6:.1f} ms</text></svg>"
    )
    legend = "".join(f'<span><i class="sw" style="background:{c}"></i>{e(p)}</span>' for p, c in [*LANE.values(), COMM])
    shown = (
        ""
        if len(lanes) == len([r for r in record.ranks.values() if r.timeline])
        else f" Shown: {len(lanes)} of {len([r for r in record.ranks.values() if r.timeline])} ranks."
    )
    buckets = any(
        str(x.get("name", "")).startswith("all_reduce bucket")
        for r, _l in lanes
        for x in record.ranks[r].timeline
        if x.get("kind") == schema.K_RANGE
    )
    strip = (
        "the thin strip is DDP's gradient all-reduce (it overlaps backward)"
        if buckets
        else "the thin strip shows Python collectives; DDP's gradient all-reduces run inside backward "
        "(rerun with --bucket-ranges to draw each bucket)"
    )
    return (
        f"<h3>Steps {picked[0]}-{picked[-1]}, rank by rank</h3><p>Consecutive steady-state steps, each lane "
        f"from the start of step {picked[0]} on that rank; {e(strip)}; the straggler is outlined.{e(shown)}</p>"
        f'<div class="bar-legend">{legend}</div>' + "".join(out)
    )


def _kv(rows: list[tuple[str, str]], kind: str) -> str:
    body = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in rows)
    return f'<table class="kv sharding" data-kind="{e(kind)}">{body}</table>'


def _on_off(v: Any) -> str:
    return "on" if v else "off"


def _layout(ev: dict[str, Any]) -> str:
    """How the gradients travel, from ``profile.summary``'s evidence: an FSDP2 or FSDP1 job's sharding
    (the facts of the summary's FSDP words, analysis/profile/breakdown.py ``fsdp_words``, a row each),
    else a DDP job's buckets."""
    fsdp = ev.get("fsdp") if isinstance(ev.get("fsdp"), dict) else None
    if fsdp:
        rank = ev.get("fsdp_rank")
        mp = fsdp.get("mp") or {}
        mp_text = ", ".join(f"{k.removesuffix('_dtype')} {v}" for k, v in mp.items()) if mp else "off"
        kind = "FSDP1" if fsdp.get("kind") == "FSDP1" else "FSDP2"
        rows: list[tuple[str, str]]
        if kind == "FSDP1":
            strategies = fsdp.get("strategies") or {}
            group = f"{fsdp.get('world', '?')} rank(s)" + (
                f" x {fsdp['replicas']} replica(s)" if fsdp.get("replicas") else ""
            )
            rows = [
                ("sharding strategy", ", ".join(f"{k} ({v} flat parameter(s))" for k, v in sorted(strategies.items()))),
                ("FSDP modules", str(fsdp.get("modules", 0))),
                ("flat parameters", str(fsdp.get("flat_params", 0))),
                ("parameters", str(fsdp.get("params", 0))),
                (f"sharded on rank {rank}", fmt_bytes(float(fsdp.get("sharded_bytes") or 0))),
                ("shard group", group),
                ("mixed precision", mp_text),
                ("use_orig_params", _on_off(fsdp.get("use_orig_params"))),
                ("CPU offload", _on_off(fsdp.get("cpu_offload"))),
            ]
        else:
            mesh = fsdp.get("mesh") or {}
            shape = "x".join(str(x) for x in mesh.get("shape") or []) or "?"
            n = int(fsdp.get("modules") or 0)
            rows = [
                ("sharded modules", str(n)),
                ("mesh", shape + (f" ({', '.join(mesh['dims'])})" if mesh.get("dims") else "")),
                ("parameters", str(fsdp.get("params", 0))),
                (f"sharded on rank {rank}", fmt_bytes(float(fsdp.get("sharded_bytes") or 0))),
                ("reshard_after_forward", f"on {int(fsdp.get('reshard_after_forward') or 0)} of {n} modules"),
                ("mixed precision", mp_text),
            ]
        comm = ev.get("fsdp_comm_ms") or {}
        if comm:
            rows.append(
                (
                    f"in {kind}'s collectives per step (rank {rank}, inside forward and backward)",
                    ", ".join(f"{k} {float(v):.1f} ms" for k, v in comm.items()),
                )
            )
        return f"<h3>Sharding ({kind})</h3>" + _kv(rows, kind)
    buckets = [int(b) for b in ev.get("buckets") or [] if isinstance(b, (int, float))]
    if not buckets:
        return ""
    shown = ", ".join(fmt_bytes(b) for b in buckets[:8]) + (
        f" ... ({len(buckets) - 8} more)" if len(buckets) > 8 else ""
    )
    return "<h3>Gradient buckets (DDP)</h3>" + _kv([("buckets", str(len(buckets))), ("sizes", shown)], "DDP")


def section(report: Report, record: Any, src: Sources) -> str:
    summary = next((f for f in report.findings if f.id == PROFILE_SUMMARY), None)
    medians = (summary.evidence or {}).get("typical_ms") if summary else None
    trace = os.path.join(record.run_dir, schema.TRACE_JSON)
    has_trace = os.path.exists(trace) or any(r.timeline for r in record.ranks.values())
    if not medians and not has_trace:
        return ""
    slow = {r for f in report.findings if f.id == PROFILE_STRAGGLER for r in f.culprits}
    out = ['<section id="profile"><h2>Where the step time goes</h2>']
    if isinstance(record.manifest.get("scaling"), list):
        out.append(_scaling(record.manifest["scaling"]))
    if medians:
        per = {int(r): m for r, m in medians.items() if isinstance(m, dict)}
        rows: list[tuple[str, dict[str, float], bool]] = []
        if len(per) <= MAX_BARS:
            rows = [(f"rank {r}{' (straggler)' if r in slow else ''}", m, r in slow) for r, m in sorted(per.items())]
        else:
            pick = sorted(slow & set(per))[:4]
            pick += [r for r in sorted(per, key=lambda r: -float(per[r].get("step", 0) or 0)) if r not in pick][
                : MAX_BARS - 1 - len(pick)
            ]
            rows = [(f"rank {r}{' (straggler)' if r in slow else ''}", per[r], r in slow) for r in pick]
            rest = [r for r in per if r not in pick]
            med = {p: statistics.median(float(per[r].get(p, 0) or 0) for r in rest) for p, _c in PHASES}
            rows.append((f"median of {ranks_label(rest)}", med, False))
        from ddpdoctor.analysis.profile.exposed import exposed_by_rank

        by_rank = exposed_by_rank(record)
        ranked = [(label, int(label.split()[1])) for label, _m, _s in rows if label.startswith("rank ")]
        marked = {label: by_rank[r] for label, r in ranked if r in by_rank}
        out.append(
            "<p>Median milliseconds per step in the steady state, by phase; the straggler is outlined"
            + (
                "; in red inside backward+comm, the gradient all-reduce after the backward compute ended (DDP's timers)"
                if marked
                else ""
            )
            + ".</p>"
        )
        out.append(_bars(rows, marked))
    if summary is not None:
        out.append(_layout(summary.evidence or {}))
    if any(r.timeline for r in record.ranks.values()):
        step_ms = {int(r): float(m.get("step", 0) or 0) for r, m in (medians or {}).items() if isinstance(m, dict)}
        if not step_ms and len(record.ranks) > MAX_LANES:  # past 64 ranks the summary keeps no medians
            from ddpdoctor.analysis.profile.breakdown import typical

            step_ms = {r: m["step"] for r, m in typical(record).items()}
        out.append(_timeline(record, slow, step_ms))
    if has_trace:
        out.append(
            f'<p>Timeline of every rank: <a href="{schema.TRACE_JSON}">{schema.TRACE_JSON}</a> in the run '
            f"directory "
            f'(<code>{e(trace)}</code>); open it in Perfetto (ui.perfetto.dev, "Open trace file"): the file '
            f"stays on your machine.</p>"
        )
    out.append("</section>")
    return "".join(out)
