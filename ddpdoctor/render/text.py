"""The terminal report: verdict, findings with each rank's line, hints, the run directory."""

from __future__ import annotations

from ddpdoctor.analysis import cost
from ddpdoctor.analysis.findings import Report, ranks_phrase
from ddpdoctor.analysis.ids import MULTINODE_PARTIAL_VIEW

# the commands that run the script under the probes: their reports always have a cost line (another report
# has one where its record holds the ranks' accounts: `analyze` of a saved run, not a post-mortem)
RUN_COMMANDS = frozenset({"hang", "check", "memleak", "profile"})


def has_cost(report: Report) -> bool:
    """Does this report state ddpdoctor's cost?"""
    return bool(report.cost) or report.command in RUN_COMMANDS


_MARK = {"error": "ERROR", "warning": "WARN", "note": "note"}


def render(report: Report) -> str:
    verdict = report.verdict.upper()
    if report.verdict == "ok" and any(f.id == MULTINODE_PARTIAL_VIEW for f in report.findings):
        verdict = "OK ON THIS NODE"  # never an OK for ranks it could not see
    out = [f"ddpdoctor {report.command}: {verdict} (exit code {report.exit_code})"]
    for f in report.findings:
        out.append(f"  [{_MARK.get(f.severity, f.severity)}] {f.id}: {f.message}")
        # one line per place, the ranks at it grouped: short at any world size
        places: dict[tuple, list[int]] = {}
        for l in f.locations:
            places.setdefault((l.file, l.line, l.func, l.role), []).append(l.rank)
        for (file, line, func, role), ranks in places.items():
            fn = f" in {func}" if func else ""
            out.append(f"      {ranks_phrase(ranks)}: {file}:{line}{fn}{f' ({role})' if role else ''}")
        if f.hint:
            out.append(f"      fix: {f.hint}")
    if report.ranks and report.verdict != "ok":
        out.append("  ranks:")
        states: dict[str, list[int]] = {}
        for r in report.ranks:
            at = f" at {r.location.file}:{r.location.line}" if r.location else ""
            states.setdefault(f"{r.detail}{at}", []).append(r.rank)
        for text, ranks in states.items():
            out.append(f"    {ranks_phrase(ranks)}: {text}")
    if not report.findings:
        out.append("  no findings")
    for n in report.notes:
        out.append(f"  note: {n}")
    if has_cost(report):
        out.append(f"  {cost.line(report.cost)}")
    out.append(f"  run directory: {report.run_dir}")
    return "\n".join(out) + "\n"
