"""Elastic restarts (torchrun ``--max-restarts``): what ended each attempt of the worker group. Pure.

The last attempt is judged as a run of its own (``registry.diagnose`` on the record ``load_run`` gives);
each earlier attempt is diagnosed the same way on its own records, and :func:`restarted` sums them up in one
finding, ``run.restarted``: a warning when the job finished after a restart (a fault that torchrun hid, and
that costs a restart each time it comes back), a note beside the last attempt's own error when the
restarts did not save the job. :func:`ended_not_restarted` is the note of a job that ddpdoctor ended while
restarts remained: a deadlock or a hang recurs on every attempt, since the same code runs again.
"""

from __future__ import annotations

import os
from typing import Any

from ddpdoctor.analysis.findings import AttemptLine, Finding, Location, Report, ranks_phrase
from ddpdoctor.analysis.ids import RUN_RESTARTED
from ddpdoctor.record import attempts as rec_attempts
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord


def attempt_line(attempt: int, report: Report) -> AttemptLine:
    """One attempt's line of the report, from its own diagnosis."""
    lead = _lead(report)
    return AttemptLine(
        attempt,
        report.verdict,
        report.exit_code,
        tuple(lead.culprits) if lead else (),
        lead.message if lead else "healthy: no findings",
        tuple(f.id for f in report.findings if f.id != RUN_RESTARTED),
    )


def _lead(report: Report) -> Finding | None:
    """The finding that says what ended an attempt: its first error, else its first finding."""
    mine = [f for f in report.findings if f.id != RUN_RESTARTED]
    return next((f for f in mine if f.severity == "error"), mine[0] if mine else None)


def _ended_by(attempt: int, report: Report) -> tuple[str, list[Location]]:
    """``attempt 0 ended at train.py:21 (crash.exception): rank 1 raised ValueError: boom`` and its locations,
    each role prefixed with the attempt (the same rank numbers come back on every attempt)."""
    lead = _lead(report)
    if lead is None:
        return f"attempt {attempt} ended with no finding (torchrun restarted it)", []
    at = next((l for l in lead.locations if l.rank in lead.culprits), None)
    where = f" at {os.path.basename(at.file)}:{at.line}" if at else ""  # the culprit's line, before the victims
    locs = [
        Location(l.rank, l.file, l.line, l.func, f"attempt {attempt}: {l.role}".rstrip(": ")) for l in lead.locations
    ]
    return f"attempt {attempt} ended{where} ({lead.id}): {lead.message}", locs


def restarted(record: RunRecord, earlier: list[Report], last_verdict: str) -> list[Finding]:
    """``run.restarted`` for a record with earlier attempts (``record.attempts``, diagnosed as ``earlier``);
    ``last_verdict``: the last attempt's own verdict (before this finding)."""
    if not record.attempts:
        return []
    most = rec_attempts.max_restarts(record.manifest.get("torchrun_args"))
    k = record.attempt
    parts: list[str] = []
    locs: list[Location] = []
    culprits: set[int] = set()
    rows: list[dict[str, Any]] = []
    for rec, rep in zip(record.attempts, earlier):
        text, at = _ended_by(rec.attempt, rep)
        parts.append(text)
        locs += at
        lead = _lead(rep)
        culprits |= set(lead.culprits if lead else ())
        line = attempt_line(rec.attempt, rep)
        rows.append(
            {
                "attempt": line.attempt,
                "verdict": line.verdict,
                "exit_code": line.exit_code,
                "culprits": list(line.culprits),
                "summary": line.summary,
                "findings": list(line.findings),
                "world_size": rec.world_size,
            }
        )
    n = len(record.attempts)
    restarts = f"{n} restart{'s' if n != 1 else ''}" + (f" of --max-restarts {most}" if most else "")
    ranks = sorted({l.rank for l in locs} | culprits)
    evidence = {"attempts": rows, "last_attempt": k, "max_restarts": most, "restarts_left": max(0, most - k)}
    where = (
        f"attempt 0's records are in the run directory, attempt k's in {schema.ATTEMPTS_DIR}/<k>/ "
        f"(`ddpdoctor analyze RUN_DIR/{schema.ATTEMPTS_DIR}/<k>` reports on one attempt alone)"
    )
    if last_verdict == "ok":
        return [
            Finding(
                RUN_RESTARTED,
                "warning",
                f"the job finished on attempt {k} after {restarts}; " + "; ".join(parts),
                "The job recovered only because torchrun restarted the worker group: the fault is still there, "
                "and each time it comes back it costs a restart and the work since the last checkpoint. Fix "
                f"what ended the earlier attempt{'s' if n != 1 else ''}; {where}.",
                tuple(ranks),
                tuple(locs),
                evidence,
                culprits=tuple(sorted(culprits)),
            )
        ]
    used_up = most and k >= most
    head = (
        f"all {k + 1} attempts failed ({restarts}, none left); the last, attempt {k}, is judged above"
        if used_up
        else f"attempt {k} ended with verdict {last_verdict} after {restarts}"
    )
    return [
        Finding(
            RUN_RESTARTED,
            "note",
            f"{head}; earlier: " + "; ".join(parts),
            "The earlier attempts are listed for the history: when they ended the same way, torchrun's restarts "
            f"only repeat the fault; {where}.",
            tuple(ranks),
            tuple(locs),
            evidence,
            culprits=tuple(sorted(culprits)),
        )
    ]


def ended_not_restarted(record: RunRecord) -> tuple[str, ...]:
    """The note of a job that the monitor ended on a deadlock or a hang while torchrun had restarts left: it
    ended the whole job, not the attempt, because the same code deadlocks again on every attempt."""
    most = rec_attempts.max_restarts(record.manifest.get("torchrun_args"))
    left = most - record.attempt
    verdict = record.monitor_event(schema.K_VERDICT)
    kill = record.monitor_event(schema.K_KILL)
    if left <= 0 or verdict is None or verdict.get("mode") not in ("certain", "timeout"):
        return ()
    if not (kill and kill.get("reason") == "verdict"):
        return ()
    what = "a proven deadlock" if verdict.get("mode") == "certain" else "a hang (--timeout)"
    return (
        f"ddpdoctor ended the job at attempt {record.attempt} rather than let torchrun restart it "
        f"({left} of --max-restarts {most} left): {what} comes back on every attempt, since the same code runs "
        f"again; {ranks_phrase(sorted(record.ranks))} were ended",
    )
