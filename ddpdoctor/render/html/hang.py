"""The hang part of the HTML report: a picture of the hang (``render.lanes``: a lane per rank over time, the
divergence marked), the ranks' collective sequences side by side around the first divergence (position, op,
shapes, call site), the culprit marked, and each rank's stack, folded.
Ranks with the same sequence window (or the same stack) share one column (one fold)."""

from __future__ import annotations

from typing import Any

from ddpdoctor.analysis.findings import Report
from ddpdoctor.record import schema
from ddpdoctor.render.html.parts import Sources, culprits_of, e, group_ranks, ranks_label, short

BEFORE, AFTER = 4, 3  # positions shown around the divergence
MAX_COLUMNS = 8  # rank groups shown side by side


def _divergence(report: Report) -> tuple[dict[str, Any], tuple[int, ...]] | None:
    for f in report.findings:
        d = f.evidence.get("divergence") if isinstance(f.evidence, dict) else None
        if isinstance(d, dict) and d.get("seq") is not None:
            return d, tuple(f.culprits) or tuple(int(r) for r in d.get("diverged") or ())
    return None


def _sequence(rec: Any, group: str, lo: int = 1, hi: int | None = None) -> tuple[dict[int, tuple], int]:
    """One rank's collectives in ``group`` by position (from ``lo`` to ``hi``): (op, shapes, site, state),
    and its last position. A position the counter passed without a ledger entry is one DDP issued from C++."""
    out: dict[int, tuple] = {}
    last = 0
    for ent in reversed(rec.ledger):  # newest first: stop before the window
        rng = ent.get("seq")
        if ent.get("group") != group or not rng:
            continue
        last = max(last, int(rng[1]))
        if int(rng[1]) < lo:
            break
        if hi is not None and int(rng[0]) > hi:
            continue
        site = tuple(ent["site"][:2]) if ent.get("site") else None
        shapes = tuple(tuple(s) for s in ent.get("shapes") or ())
        for s in range(int(rng[0]), int(rng[1]) + 1):
            out[s] = (ent.get("op", "?"), shapes, site, ent.get("st", schema.ST_DONE))
    hb = rec.last_hb or {}
    seq = (hb.get("seq") or {}).get(group)
    if seq is not None:
        last = max(last, int(seq))
    p = hb.get("pending") or {}
    if p.get("group") == group and p.get("seq") and int(p["seq"]) not in out:
        out[int(p["seq"])] = (
            p.get("op", "?"),
            tuple(tuple(s) for s in p.get("shapes") or ()),
            tuple(p["site"][:2]) if p.get("site") else None,
            schema.ST_ISSUED,
        )
        last = max(last, int(p["seq"]))
    for s in range(lo, (last if hi is None else min(last, hi)) + 1):
        out.setdefault(s, ("DDP internal", (), None, schema.ST_DONE))
    return out, last


def _cell(slot: tuple | None, src: Sources | None = None) -> str:
    if slot is None:
        return '<span class="small">not issued</span>'
    op, shapes, site, st = slot
    shp = ", ".join("x".join(map(str, s)) or "scalar" for s in shapes[:3])
    at = f'<br><code title="{e(site[0])}">{e(short(site[0]))}:{e(site[1])}</code>' if site else ""
    state = {schema.ST_ISSUED: " (waiting)", schema.ST_ERROR: " (error)", schema.ST_ASYNC: " (async)"}.get(st, "")
    code = src.line(site[0], int(site[1])) if (src and site) else None
    quote = f'<br><code class="small">{e(code)}</code>' if code else ""
    return f"<b>{e(op)}</b>{f'({e(shp)})' if shp else ''}{e(state)}{at}{quote}"


def section(report: Report, record: Any, src: Sources) -> str:
    """The hang section: the picture of the hang, the sequences around the divergence, the stacks."""
    from ddpdoctor.render import lanes

    parts = []
    if lanes.applies(record, report):
        parts.append(f'<div class="lanes-wrap">{lanes.lanes_svg(record, report)}</div>')
    found = _divergence(report)
    if found:
        parts.append(_sequences(record, found[0], found[1], src))
    stacks = _stacks(report, record)
    if stacks:
        parts.append(stacks)
    if not parts:
        return ""
    return '<section id="hang"><h2>Collectives and stacks</h2>' + "".join(parts) + "</section>"


def _sequences(record: Any, div: dict[str, Any], culprits: tuple[int, ...], src: Sources) -> str:
    group, at = str(div.get("group")), int(div["seq"])
    lo, hi = max(1, at - BEFORE), at + AFTER
    windows: dict[int, tuple] = {}
    for r, rec in record.ranks.items():
        seq, last = _sequence(rec, group, lo, hi)
        if last == 0:
            continue
        windows[r] = tuple(seq.get(s) for s in range(lo, hi + 1))
    if not windows:
        return ""
    hi = max([lo] + [lo + i for w in windows.values() for i, sl in enumerate(w) if sl is not None])
    groups = group_ranks(windows, culprits)
    shown, rest = groups[:MAX_COLUMNS], groups[MAX_COLUMNS:]
    head = ["<th>#</th>"]
    for _w, ranks in shown:
        cul = set(ranks) & set(culprits)
        cls = ' class="cul"' if cul else ""
        head.append(f"<th{cls}>{e(ranks_label(ranks))}{' (culprit)' if cul else ''}</th>")
    rows = []
    for i, s in enumerate(range(lo, hi + 1)):
        dcls = ' class="div"' if s == at else ""
        cells = [f"<th{dcls}>{s}{' &#9664; first divergence' if s == at else ''}</th>"]
        for w, ranks in shown:
            classes = [
                c
                for c, on in (
                    ("div", s == at),
                    ("cul", bool(set(ranks) & set(culprits))),
                    ("waiting", w[i] is not None and w[i][3] == schema.ST_ISSUED),
                )
                if on
            ]
            quote = s == at or (w[i] is not None and w[i][3] == schema.ST_ISSUED)  # the source text where it matters
            cells.append(f'<td class="{" ".join(classes)}">{_cell(w[i], src if quote else None)}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = (
        (
            f'<p class="small">{len(rest)} more group(s) of ranks with other sequences: '
            f"{e('; '.join(ranks_label(rs) for _w, rs in rest))}</p>"
        )
        if rest
        else ""
    )
    return (
        f"<h3>Collective sequences of group {e(group)} around position #{at}</h3>"
        f'<table class="grid seq"><thead><tr>{"".join(head)}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
        f'{more}<p class="small">Positions counted per process group; "DDP internal" is a collective DDP '
        f'issued from C++ (gradient bucket all-reduce, buffer broadcast); "(waiting)" never completed.</p>'
    )


def _main_stack(rec: Any) -> tuple[tuple, str] | None:
    """The main thread's frames (file, line, func) and where they came from."""
    if rec.stacks:
        for th in rec.stacks.get("threads") or ():
            if th.get("main"):
                return tuple(tuple(f[:3]) for f in th.get("stack") or ()), "stack dump at the verdict"
    err = rec.error or {}
    if err.get("frames"):
        return tuple(tuple(f[:3]) for f in err["frames"] if isinstance(f, (list, tuple))), "exception traceback"
    return None


def _stacks(report: Report, record: Any) -> str:
    culprits = culprits_of(report)
    stacks: dict[int, tuple] = {}
    raw: dict[int, str] = {}
    for r, rec in record.ranks.items():
        st = _main_stack(rec)
        if st:
            stacks[r] = st
        elif rec.fatal or rec.terminated:
            raw[r] = (rec.fatal or rec.terminated)[-6000:]
    if not stacks and not raw:
        return ""
    out = ["<h3>Stacks (main thread)</h3>"]
    for (frames, why), ranks in group_ranks(stacks, culprits):
        cul = ' <span class="culprit">culprit</span>' if set(ranks) & culprits else ""
        lines = []
        for fr in frames:
            path = str(fr[0]) if fr else "?"
            user = not ("site-packages" in path or "/ddpdoctor/" in path or path.startswith("<"))
            lines.append(
                f'<div class="{"user" if user else "lib"}">{e(path)}:{e(fr[1] if len(fr) > 1 else "?")} '
                f"in {e(fr[2] if len(fr) > 2 else '?')}</div>"
            )
        innermost = next(
            (
                f
                for f in reversed(frames)
                if f
                and "site-packages" not in str(f[0])
                and "/ddpdoctor/" not in str(f[0])
                and not str(f[0]).startswith("<")
            ),
            None,
        )
        top = f" at {short(str(innermost[0]))}:{innermost[1]}" if innermost else ""
        out.append(
            f"<details><summary><b>{e(ranks_label(ranks))}</b>{cul}: {e(why)}{e(top)} "
            f'({len(frames)} frames)</summary><div class="frames mono">{"".join(lines)}</div></details>'
        )
    for text, ranks in group_ranks(raw, culprits):
        out.append(
            f"<details><summary><b>{e(ranks_label(ranks))}</b>: faulthandler dump</summary>"
            f"<pre>{e(text)}</pre></details>"
        )
    return "".join(out)
