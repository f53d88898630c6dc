"""A picture of a hang: one lane per rank over time, each collective a tick, each wait a bar to the verdict,
the rank that diverged marked at its collective and the first divergence a line across every lane. A rank that
calls on several process groups (a device mesh's tp and dp, a pipeline's stages) gets one row per group in its
lane, each labelled with the group and its members: a wait on one group and the divergence on another show as
such. One self-contained SVG, no plotting library. Pure."""

from __future__ import annotations

from html import escape
from typing import Any

from ddpdoctor.record import schema

MAX_LANES = 16  # culprits first, then the lowest ranks; the rest said in one line
MAX_TICKS = 400  # collectives drawn per lane (the latest)
LANE_H, LEFT, RIGHT, TOP = 36, 110, 20, 40
ROW_H = 14  # each further group's row in a rank's lane
ACTIVE_SHARE = 0.7  # of the width, for the collectives when the wait after them is far longer (broken axis)


def _where(site: Any) -> str:
    if not site:
        return ""
    return f" at {str(site[0]).rsplit('/', 1)[-1]}:{site[1]}"


def divergence_of(report: Any) -> tuple[dict[str, Any], tuple[int, ...]] | None:
    """The first finding's divergence (its ``evidence["divergence"]``) and the ranks it blames."""
    for f in report.findings:
        d = f.evidence.get("divergence") if isinstance(f.evidence, dict) else None
        if isinstance(d, dict) and d.get("seq") is not None:
            return d, tuple(f.culprits) or tuple(int(r) for r in d.get("diverged") or ())
    return None


def _at_seq(rec: Any, group: str, seq: int) -> dict[str, Any] | None:
    """The rank's collective at position ``seq`` of ``group`` (its ledger entry, or its pending wait)."""
    for ent in reversed(rec.ledger):
        rng = ent.get("seq")
        if ent.get("group") == group and rng and int(rng[0]) <= seq <= int(rng[1]):
            return ent
    p = (rec.last_hb or {}).get("pending") or {}
    if p.get("group") == group and p.get("seq") == seq:
        return {**p, "t0": p.get("since")}
    return None


def groups_of(rec: Any) -> list[str]:
    """The groups a rank called on, in the order it first did (its pending call's last)."""
    seen: dict[str, None] = {}
    for ent in rec.ledger:
        if ent.get("group") is not None and not ent.get("p2p"):
            seen.setdefault(str(ent["group"]), None)
    p = (rec.last_hb or {}).get("pending") or {}
    if p.get("group") is not None:
        seen.setdefault(str(p["group"]), None)
    return list(seen)


def applies(record: Any, report: Any) -> bool:
    """A hang (a verdict of hang, a divergence or a rank still waiting): there is something to draw."""
    if report.verdict == "hang" or divergence_of(report):
        return True
    return any(((rec.last_hb or {}).get("pending")) for rec in record.ranks.values())


def lanes_svg(record: Any, report: Any, width: int = 1000) -> str:
    """The picture (``applies`` says whether there is one to draw)."""
    found = divergence_of(report)
    div, culprits = found if found else ({}, ())
    culprit_set = {int(r) for r in culprits}
    ranks = sorted(record.ranks, key=lambda r: (r not in culprit_set, r))
    shown, left_out = ranks[:MAX_LANES], len(ranks) - MAX_LANES
    verdict = record.monitor_event(schema.K_VERDICT)
    t_end = float(verdict["t"]) if verdict else record.latest_t()
    # the axis spans what is drawn (the latest collectives and the waits), not the start-up before them
    marks = [float(x["t0"]) for r in shown for x in record.ranks[r].ledger[-MAX_TICKS:] if x.get("t0") is not None]
    marks += [
        float(p["since"]) for r in shown if (p := (record.ranks[r].last_hb or {}).get("pending") or {}).get("since")
    ]
    t0 = min(marks) if marks else t_end - 1.0
    if t_end <= t0:
        t_end = t0 + 1.0
    pw = width - LEFT - RIGHT
    rows = {r: groups_of(record.ranks[r]) for r in shown}
    # one row per group only where some rank calls on more than one: a one-group job keeps its one line a rank
    several = any(len(g) > 1 for g in rows.values())
    members: dict[str, set[int]] = {}
    for r in record.ranks:
        for g in groups_of(record.ranks[r]) if several else ():
            members.setdefault(g, set()).add(r)
    tops, y_next = {}, float(TOP)
    for r in shown:
        tops[r] = y_next
        y_next += LANE_H + (ROW_H * (len(rows[r]) - 1) if several and rows[r] else 0)
    lanes_h = y_next - TOP
    height = int(TOP + lanes_h + 40)
    # A hang's wait is seconds to minutes, its collectives milliseconds apart: on one linear axis every tick
    # fell into the first pixels. The activity (first tick to the last tick or wait start) then gets
    # ACTIVE_SHARE of the width and the wait after it the rest, with the break marked on the axis.
    t_act = max(marks) if marks else t0
    broken = t_act > t0 and (t_end - t_act) > 2 * (t_act - t0)
    x_act = LEFT + pw * ACTIVE_SHARE if broken else LEFT + (t_act - t0) / (t_end - t0) * pw

    def X(t: float) -> float:
        t = min(max(t, t0), t_end)
        if not broken:
            return LEFT + (t - t0) / (t_end - t0) * pw
        if t <= t_act:
            return LEFT + (t - t0) / (t_act - t0) * (x_act - LEFT)
        return x_act + (t - t_act) / (t_end - t_act) * (LEFT + pw - x_act)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="lanes" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11" data-ranks="{",".join(map(str, shown))}">',
        f'<text x="{LEFT}" y="16" font-size="13">Each rank over time: its collectives (ticks), its wait (bar), '
        f"the divergence (red)</text>",
    ]
    group = str(div.get("group")) if div else None
    seq = int(div["seq"]) if div else None
    div_t: float | None = None
    for r in shown:
        rec = record.ranks[r]
        y = tops[r] + 12
        row_y = {g: y + k * ROW_H for k, g in enumerate(rows[r])} if several else {}
        cul = r in culprit_set
        label = f"rank {r}{' (culprit)' if cul else ''}"
        out.append(
            f'<g class="lane" data-rank="{r}"{" data-culprit=" + chr(34) + "1" + chr(34) if cul else ""}>'
            f'<text x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end"{" fill=" + chr(34) + "#c00" + chr(34) if cul else ""}>'
            f"{escape(label)}</text>"
            + (f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + pw}" y2="{y:.1f}" stroke="#ddd"/>' if not several else "")
        )
        for g, gy in row_y.items():
            who = ",".join(map(str, sorted(members.get(g, ()))))
            out.append(
                f'<line class="group-row" data-group="{escape(g)}" x1="{LEFT}" y1="{gy:.1f}" x2="{LEFT + pw}" '
                f'y2="{gy:.1f}" stroke="#ddd"/><text class="group-label" x="{LEFT + pw}" y="{gy - 2:.1f}" '
                f'text-anchor="end" font-size="9" fill="#777">group {escape(g)} [{who}]</text>'
            )
        ticks = [e for e in rec.ledger if e.get("t0") is not None][-MAX_TICKS:]
        for ent in ticks:
            x = X(float(ent["t0"]))
            ty = row_y.get(str(ent.get("group")), y)
            out.append(
                f'<line class="coll" x1="{x:.1f}" y1="{ty - 6:.1f}" x2="{x:.1f}" y2="{ty + 6:.1f}" stroke="#888"/>'
            )
        p = (rec.last_hb or {}).get("pending") or {}
        note = ""
        if p.get("since") is not None:
            x = X(float(p["since"]))
            py = row_y.get(str(p.get("group")), y)
            out.append(
                f'<rect class="wait" x="{x:.1f}" y="{py - 5:.1f}" width="{max(1.0, X(t_end) - x):.1f}" height="10" '
                f'fill="{"#f4b6b6" if cul else "#f3d98b"}"/>'
            )
            on = f" of group {p.get('group')}" if several else ""
            note = f"waits in {p.get('op', '?')} #{p.get('seq', '?')}{on}{_where(p.get('site'))}"
        elif rec.error:
            note = f"raised {rec.error.get('type', '?')}"
        if group is not None and seq is not None and cul:
            ent = _at_seq(rec, group, seq)
            if ent and ent.get("t0") is not None:
                x = X(float(ent["t0"]))
                div_t = float(ent["t0"]) if div_t is None else min(div_t, float(ent["t0"]))
                cy = row_y.get(group, y)
                out.append(f'<circle class="diverged" cx="{x:.1f}" cy="{cy:.1f}" r="5" fill="#c00"/>')
                note = f"#{seq} {ent.get('op', '?')}{_where(ent.get('site'))} (diverged); " + note
        if note:
            ny = max(row_y.values(), default=y) + 19
            out.append(f'<text class="note" x="{LEFT}" y="{ny:.1f}" font-size="10">{escape(note.rstrip("; "))}</text>')
        out.append("</g>")
    if div_t is not None:
        x = X(div_t)
        bottom = TOP + lanes_h
        out.append(
            f'<line class="divergence" x1="{x:.1f}" y1="{TOP - 4}" x2="{x:.1f}" y2="{bottom}" stroke="#c00" '
            f'stroke-dasharray="4 3"/>'
            f'<text x="{x + 4:.1f}" y="{TOP - 6}" fill="#c00">first divergence: collective #{seq} of group '
            f"{escape(str(group))}</text>"
        )
    axis_y = TOP + lanes_h + 14
    if broken:
        for k in range(4):  # the activity's own scale, then the break, then the verdict
            t = t0 + (t_act - t0) * k / 3
            out.append(f'<text x="{X(t):.1f}" y="{axis_y}" text-anchor="middle">{t - t0:.3f}</text>')
        out.append(
            f'<text class="axis-break" x="{(x_act + LEFT + pw) / 2:.1f}" y="{axis_y}" text-anchor="middle">'
            f"// then {t_end - t_act:.1f} s of waiting //</text>"
            f'<text x="{LEFT + pw:.1f}" y="{axis_y}" text-anchor="end">{t_end - t0:.1f}</text>'
        )
    else:
        for k in range(5):
            t = t0 + (t_end - t0) * k / 4
            out.append(f'<text x="{X(t):.1f}" y="{axis_y}" text-anchor="middle">{t - t0:.2f}</text>')
    out.append(
        f'<text x="{LEFT + pw / 2}" y="{axis_y + 16}" text-anchor="middle">seconds (0: the first collective '
        f"drawn; the end: the verdict{'; the axis is broken where the wait begins' if broken else ''})</text>"
    )
    if left_out > 0:
        out.append(f'<text x="{LEFT}" y="{axis_y + 16}">Shown: {len(shown)} of {len(ranks)} ranks</text>')
    out.append("</svg>")
    return "\n".join(out)
