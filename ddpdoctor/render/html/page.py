"""The HTML report: one self-contained file (inline CSS and SVG, no script, nothing loaded from the
network) that a browser opens offline and a CI job can attach.

``render(report, record) -> str``. Pure but for reading the user's source files for the excerpts (at
render time; a missing file gives a note). Everything that comes from the record or the script is
escaped. Ranks are grouped by state and line, so the page stays short at 1,024 ranks. The sections per
fault family come from ``render.html.SECTIONS`` (keyed by family: ``hang.py``, ``memleak.py``,
``profile.py``, ``check.py``); each shows itself only when the record holds its data.
"""

from __future__ import annotations

import time
from typing import Any

from ddpdoctor.analysis.catalog import entry
from ddpdoctor.analysis.findings import SEVERITIES, Finding, Report
from ddpdoctor.render.html.parts import CSS, Sources, culprits_of, e, evidence_html, group_ranks, ranks_label, short

_SEV = {"error": "error", "warning": "warning", "note": "note"}


def render(report: Report, record: Any = None) -> str:
    """The whole page. ``record`` (a RunRecord) adds the per-family sections; without it the page
    holds the verdict, the findings with their source excerpts, and the ranks."""
    from ddpdoctor.render.html import SECTIONS

    src = Sources()
    body = [_header(report, record), _findings(report, src), _ranks(report)]
    if record is not None:
        for section in SECTIONS.values():
            body.append(section(report, record, src))
    body.append(_notes(report))
    title = f"ddpdoctor {report.command}: {report.verdict.upper()}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # no network, no script: a report must not load or run anything
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">"
        f"<title>{e(title)}</title><style>{CSS}</style></head>\n<body>\n"
        + "\n".join(b for b in body if b)
        + "\n</body></html>\n"
    )


def _header(report: Report, record: Any) -> str:
    m = getattr(record, "manifest", None) or {}
    script = m.get("script")
    args = " ".join(str(a) for a in m.get("script_args") or [])
    world = getattr(record, "world_size", None) if record is not None else None
    bits = []
    if script:
        bits.append(f"script <code>{e(script)}{(' ' + e(args)) if args else ''}</code>")
    if world:
        bits.append(f"world size {e(world)}")
    if m.get("torchrun_args"):
        bits.append(f"torchrun <code>{e(' '.join(map(str, m['torchrun_args'])))}</code>")
    msgs = {f.message for f in report.findings}
    counts = {s: sum(1 for f in report.findings if f.severity == s) for s in SEVERITIES}
    tally = ", ".join(f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n) or "no findings"
    return (
        f'<header><h1>ddpdoctor {e(report.command)} <span class="verdict v-{e(report.verdict)}" '
        f'id="verdict">{e(report.verdict.upper())}</span> <span class="meta">exit code '
        f"{e(report.exit_code)}</span></h1>"
        f'<p class="meta">{" · ".join(bits)}</p>'
        f"<p>{e(report.summary) if report.summary and report.summary not in msgs else ''}</p>"
        f'<p class="meta" id="cost">{e(cost_line(report))}</p>'
        f'<p class="meta">{e(tally)} · run directory <code>{e(report.run_dir)}</code> · written '
        f"{e(time.strftime('%Y-%m-%d %H:%M:%S'))}</p></header>"
    )


def cost_line(report: Report) -> str:
    """The cost line, as the text report writes it (none for a report of no ranks)."""
    from ddpdoctor.analysis import cost
    from ddpdoctor.render.text import has_cost

    return cost.line(report.cost) if has_cost(report) else ""


def _findings(report: Report, src: Sources) -> str:
    if not report.findings:
        return '<section id="findings"><h2>Findings</h2><p>No findings.</p></section>'
    return (
        '<section id="findings"><h2>Findings</h2>'
        + "".join(_finding(f, i, src) for i, f in enumerate(report.findings))
        + "</section>"
    )


def _finding(f: Finding, i: int, src: Sources) -> str:
    sev = _SEV.get(f.severity, "note")
    culprits = set(f.culprits) if f.severity != "note" else set()  # a note blames no rank
    cul = (
        (
            f' <span class="culprit" data-culprits="{e(",".join(map(str, sorted(culprits))))}">culprit: '
            f"{e(ranks_label(culprits))}</span>"
        )
        if culprits
        else ""
    )
    out = [
        f'<article class="finding {sev}" id="finding-{i}" data-finding="{e(f.id)}">',
        f'<div><span class="sev">{e(f.severity)}</span><span class="fid">{e(f.id)}</span>{cul}</div>',
        f'<p class="msg">{e(f.message)}</p>',
    ]
    # one excerpt per place; the ranks at a place grouped; the culprits' places first
    places: dict[tuple, list[int]] = {}
    for loc in f.locations:
        places.setdefault((loc.file, loc.line, loc.func, loc.role), []).append(loc.rank)
    order = sorted(places.items(), key=lambda kv: (not culprits & set(kv[1]), min(kv[1])))
    for (file, line, func, role), ranks in order:
        is_cul = bool(culprits & set(ranks))
        mark = ' <span class="culprit">culprit</span>' if is_cul else ""
        fn = f" in <code>{e(func)}</code>" if func else ""
        out.append(
            f'<div class="loc"><b>{e(ranks_label(ranks))}</b>: <code title="{e(file)}">{e(short(file))}:'
            f'{e(line)}</code>{fn} <span class="role">{e(role)}</span>{mark}</div>'
        )
        out.append(src.excerpt(file, int(line)))
    if f.hint:
        out.append(f'<p class="hint"><b>fix:</b> {e(f.hint)}</p>')
    # the finding's page as text, not a link: the report points nowhere on the network
    url = entry(f.id).url
    out.append(
        f'<p class="small doc">page: <code>ddpdoctor findings {e(f.id)}</code>'
        + (f" (or <code>{e(url)}</code>)" if url else "")
        + "</p>"
    )
    out.append(evidence_html(f.evidence))
    out.append("</article>")
    return "".join(out)


def _ranks(report: Report) -> str:
    if not report.ranks:
        return ""
    culprits = culprits_of(report)
    by_rank = {
        r.rank: (r.state, r.detail, (r.location.file, r.location.line) if r.location else None) for r in report.ranks
    }
    rows = []
    for (state, detail, where), ranks in group_ranks(by_rank, culprits):
        at = f'<code title="{e(where[0])}">{e(short(where[0]))}:{e(where[1])}</code>' if where else ""
        mark = ' <span class="culprit">culprit</span>' if culprits & set(ranks) else ""
        rows.append(
            f"<tr><td>{e(ranks_label(ranks))}{mark}</td><td>{e(state)}</td><td>{e(detail)}</td><td>{at}</td></tr>"
        )
    return (
        '<section id="ranks"><h2>Ranks</h2><table class="grid"><thead><tr><th>ranks</th><th>state</th>'
        f"<th>detail</th><th>line</th></tr></thead><tbody>{''.join(rows)}</tbody></table></section>"
    )


def _notes(report: Report) -> str:
    if not report.notes:
        return ""
    items = "".join(f"<li>{e(n)}</li>" for n in report.notes)
    return f'<section id="notes"><h2>Notes</h2><ul>{items}</ul></section>'
