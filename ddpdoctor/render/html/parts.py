"""Small pieces the HTML report is built from: escaping, rank groups, source excerpts, tables, the style
sheet. Pure but for reading the user's source files (a missing file gives a note, never an error)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from html import escape
from typing import Any

from ddpdoctor.analysis.findings import rank_list

EXCERPT = 3  # lines of context on each side of a marked line


def e(x: Any) -> str:
    """Escape anything for HTML text or a quoted attribute."""
    return escape(str(x), quote=True)


def ranks_label(ranks: Iterable[int]) -> str:
    rs = sorted({int(r) for r in ranks})
    if not rs:
        return "no rank"
    return f"rank {rs[0]}" if len(rs) == 1 else f"{len(rs)} ranks {rank_list(rs)}"


def group_ranks(by_rank: dict[int, Any], first: Iterable[int] = ()) -> list[tuple[Any, list[int]]]:
    """``{rank: key}`` -> [(key, ranks)] with the groups of ``first`` ranks (the culprits) first, then by size
    (smallest first: the odd ones out), then by lowest rank. A ``first`` rank never shares a group with
    another rank (a culprit mark on a row then names only culprits). Keys must be hashable."""
    lead = {int(r) for r in first}
    groups: dict[tuple[Any, bool], list[int]] = {}
    for r, k in sorted(by_rank.items()):
        groups.setdefault((k, r in lead), []).append(r)
    ordered = sorted(groups.items(), key=lambda kv: (not kv[0][1], len(kv[1]), kv[1][0]))
    return [(k, ranks) for (k, _lead), ranks in ordered]


def culprits_of(report: Any) -> set[int]:
    """The ranks the report's findings name as culprits; a note names none (nothing is at fault)."""
    return {r for f in report.findings if f.severity != "note" for r in f.culprits}


def short(path: str) -> str:
    return os.path.basename(path) if path else "?"


class Sources:
    """Reads the user's files once per report; tolerates missing and unreadable ones."""

    def __init__(self) -> None:
        self._cache: dict[str, list[str] | None] = {}

    def lines(self, path: str) -> list[str] | None:
        if path not in self._cache:
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    self._cache[path] = f.read(4_000_000).splitlines()
            except (OSError, ValueError):
                self._cache[path] = None
        return self._cache[path]

    def line(self, path: str, line: int) -> str | None:
        src = self.lines(path)
        return src[line - 1].strip() if src and 0 < line <= len(src) else None

    def excerpt(self, path: str, line: int, context: int = EXCERPT) -> str:
        src = self.lines(path)
        if src is None or not 0 < line <= len(src):
            why = "file not readable here" if src is None else f"the file has {len(src)} lines"
            return f'<p class="nosrc">source not available ({e(why)}): {e(path)}:{e(line)}</p>'
        lo, hi = max(1, line - context), min(len(src), line + context)
        rows = []
        for n in range(lo, hi + 1):
            cls = ' class="mark"' if n == line else ""
            arrow = "&#9654;" if n == line else ""
            rows.append(
                f'<tr{cls}><td class="ln">{n}</td><td class="ar">{arrow}</td>'
                f'<td class="code">{e(src[n - 1]) or " "}</td></tr>'
            )
        return f'<table class="src" data-file="{e(path)}" data-line="{line}">' + "".join(rows) + "</table>"


def table(head: list[str], rows: list[list[str]], cls: str = "grid") -> str:
    """``rows`` hold HTML already escaped by the caller."""
    h = "".join(f"<th>{e(x)}</th>" for x in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>'


def fmt_bytes(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def evidence_html(ev: dict[str, Any], limit: int = 600) -> str:
    """A finding's evidence as a key/value table (values as compact JSON, cut to ``limit`` characters)."""
    import json

    if not ev:
        return ""
    rows = []
    for k, v in ev.items():
        text = v if isinstance(v, str) else json.dumps(v, default=str, separators=(", ", ": "))
        if len(text) > limit:
            text = text[:limit] + " ..."
        rows.append(f"<tr><th>{e(k)}</th><td><code>{e(text)}</code></td></tr>")
    return f'<details class="ev"><summary>evidence</summary><table class="kv">{"".join(rows)}</table></details>'


CSS = """
:root{--err:#b3261e;--warn:#9a6700;--note:#57606a;--ok:#1a7f37;--bg:#fff;--fg:#1f2328;--mut:#656d76;
--line:#d0d7de;--mark:#fff5b1;--cul:#ffebe9}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg);
margin:0 auto;max-width:1200px;padding:16px 24px}
h1{font-size:20px;margin:4px 0}h2{font-size:17px;margin:22px 0 8px;border-bottom:1px solid var(--line)}
h3{font-size:15px;margin:14px 0 6px}code,pre,.code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,
monospace;font-size:12.5px}
.verdict{display:inline-block;padding:2px 10px;border-radius:4px;color:#fff;font-weight:600;letter-spacing:.03em}
.v-ok{background:var(--ok)}.v-hang,.v-crash,.v-error,.v-findings{background:var(--err)}.v-interrupted{background:var(--warn)}
.meta{color:var(--mut)}
.finding{border:1px solid var(--line);border-left:5px solid var(--note);border-radius:4px;padding:8px 12px;margin:10px 0}
.finding.error{border-left-color:var(--err)}.finding.warning{border-left-color:var(--warn)}
.sev{font-weight:700;text-transform:uppercase;font-size:12px;margin-right:6px}
.error .sev{color:var(--err)}.warning .sev{color:var(--warn)}.note .sev{color:var(--note)}
.fid{font-family:ui-monospace,monospace;font-weight:600}
.culprit{background:var(--cul);color:var(--err);border-radius:3px;padding:0 5px;font-weight:600;font-size:12px}
.lanes-wrap{overflow-x:auto;margin:8px 0}
.hint{margin:6px 0;padding:4px 8px;background:#f6f8fa;border-radius:4px}
.loc{margin:8px 0 4px}.role{color:var(--mut)}
table.src{border-collapse:collapse;margin:2px 0 8px;width:100%;background:#f6f8fa;border:1px solid var(--line)}
table.src td{padding:0 6px;white-space:pre;vertical-align:top}table.src .ln{color:var(--mut);text-align:right;width:3em}
table.src .ar{width:1em;color:var(--err)}table.src tr.mark{background:var(--mark)}table.src tr.mark .code{font-weight:600}
.nosrc{color:var(--mut);font-style:italic}
table.grid,table.kv{border-collapse:collapse;margin:6px 0}
table.grid th,table.grid td,table.kv th,table.kv td{border:1px solid var(--line);padding:3px 8px;text-align:left;
vertical-align:top}
table.grid th{background:#f6f8fa}table.kv th{background:#f6f8fa;font-weight:600;white-space:nowrap}
table.seq td.div,table.seq th.div{background:var(--mark)}table.seq td.cul{box-shadow:inset 3px 0 0 var(--err)}
table.seq td.waiting{font-weight:600}table.seq th.cul{color:var(--err)}.small{font-size:12px;color:var(--mut)}
details{margin:4px 0}summary{cursor:pointer}pre{background:#f6f8fa;padding:6px 8px;overflow-x:auto;margin:4px 0}
.frames div.user{font-weight:600}.frames div{white-space:pre}
svg text{font-family:system-ui,sans-serif}.bar-legend span{display:inline-block;margin-right:12px}
.sw{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
"""
