"""The versioned JSON report (docs/json-schema.md)."""

from __future__ import annotations

import json

from ddpdoctor.analysis.catalog import entry
from ddpdoctor.analysis.findings import REPORT_SCHEMA, REPORT_VERSION, Location, Report


def _location(l: Location) -> dict:
    """A location, one shape for ``findings[].locations`` and ``ranks[].location``."""
    return {"rank": l.rank, "file": l.file, "line": l.line, "function": l.func, "role": l.role}


def to_dict(report: Report) -> dict:
    """The report as the JSON document's dict."""
    return {
        "schema": REPORT_SCHEMA,
        "version": REPORT_VERSION,
        "command": report.command,
        "verdict": report.verdict,
        "exit_code": report.exit_code,
        "run_dir": report.run_dir,
        "summary": report.summary,
        "findings": [
            {
                "id": f.id,
                "severity": f.severity,
                "ranks": list(f.ranks),
                "culprits": list(f.culprits),
                "locations": [_location(l) for l in f.locations],
                "message": f.message,
                "hint": f.hint,
                "url": entry(f.id).url,  # the finding's page (`ddpdoctor findings ID` prints it)
                "evidence": f.evidence,
            }
            for f in report.findings
        ],
        "ranks": [
            {
                "rank": r.rank,
                "state": r.state,
                "detail": r.detail,
                "location": _location(r.location) if r.location else None,
            }
            for r in report.ranks
        ],
        "notes": list(report.notes),
        "figures": report.figures,
        "cost": report.cost,  # analysis/cost.py: ddpdoctor's own time per step (empty: not measured)
        # elastic restarts (--max-restarts): every attempt, oldest first, the last one being the report itself
        "attempts": [
            {
                "attempt": a.attempt,
                "verdict": a.verdict,
                "exit_code": a.exit_code,
                "culprits": list(a.culprits),
                "summary": a.summary,
                "findings": list(a.findings),
            }
            for a in report.attempts
        ],
    }


def render(report: Report) -> str:
    return json.dumps(to_dict(report), indent=2, default=str) + "\n"
