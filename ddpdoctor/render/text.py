"""The terminal report: verdict, findings with each rank's line, hints, the run directory."""

from __future__ import annotations

from ddpdoctor.analysis.model import Report

_MARK = {"error": "ERROR", "warning": "WARN", "note": "note"}


def render(report: Report) -> str:
    out = [f"ddpdoctor {report.command}: {report.verdict.upper()} (exit code {report.exit_code})"]
    for f in report.findings:
        out.append(f"  [{_MARK.get(f.severity, f.severity)}] {f.id}: {f.message}")
        for l in f.locations:
            role = f" ({l.role})" if l.role else ""
            fn = f" in {l.func}" if l.func else ""
            out.append(f"      rank {l.rank}: {l.file}:{l.line}{fn}{role}")
        if f.hint:
            out.append(f"      fix: {f.hint}")
    if report.ranks and report.verdict != "ok":
        out.append("  ranks:")
        for r in report.ranks:
            at = f" at {r.location.file}:{r.location.line}" if r.location else ""
            out.append(f"    rank {r.rank}: {r.detail}{at}")
    if not report.findings:
        out.append("  no findings")
    for n in report.notes:
        out.append(f"  note: {n}")
    out.append(f"  run directory: {report.run_dir}")
    return "\n".join(out) + "\n"
