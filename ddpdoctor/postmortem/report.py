"""The Report of a post-mortem: verdict and exit code by the same rules as ``analysis.diagnose``, so
``--json``/``--junit`` and the exit-code table mean the same. Pure: no torch."""

from __future__ import annotations

import dataclasses

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, Report, Verdict, severity_rank
from ddpdoctor.errors import ExitCode
from ddpdoctor.postmortem import detect
from ddpdoctor.postmortem.inputs import Inputs


def verdict_of(findings: list[Finding], fail_on: str) -> tuple[Verdict, int]:
    """(verdict, exit code) as ``diagnose`` picks them: hang before crash before other errors."""
    errors = [f for f in findings if f.severity == "error"]
    fam = {f.id.split(".", 1)[0] for f in errors}
    nodump = [f for f in errors if f.id == "postmortem.no-dump"]
    if "hang" in fam or any(f.evidence.get("waiting") for f in nodump):
        return "hang", ExitCode.HANG  # the others wait for the rank that left no dump
    if "crash" in fam or nodump:
        return "crash", ExitCode.FINDINGS
    if errors:
        return "findings", ExitCode.FINDINGS
    if fail_on in ("warning", "note") and any(severity_rank(f.severity) <= severity_rank(fail_on) for f in findings):
        return "ok", ExitCode.FINDINGS
    return "ok", ExitCode.OK


def build(inp: Inputs, config: Config) -> Report:
    """The post-mortem of what ``inp`` holds."""
    from ddpdoctor.postmortem.inputs import no_gc

    with no_gc():
        found, ranks, notes = detect.findings(inp)
    found.sort(key=lambda f: severity_rank(f.severity))
    from ddpdoctor.analysis.registry import pick

    found, left = pick(found, config)
    notes = [*notes, *left]
    verdict, code = verdict_of(found, config.fail_on)
    where = ", ".join(inp.paths)
    return Report(
        command="analyze",
        verdict=verdict,
        exit_code=code,
        run_dir=where,
        findings=tuple(found),
        ranks=tuple(ranks),
        summary=found[0].message if found else "healthy: no findings",
        notes=tuple(notes),
    )


def merge(a: Report, b: Report) -> Report:
    """One report of a run directory's diagnosis and a post-mortem of other records given with it."""
    order = {"hang": 0, "crash": 1, "error": 1, "findings": 2, "ok": 3}
    verdict = min(a.verdict, b.verdict, key=lambda v: order.get(v, 2))
    code = ExitCode.HANG if ExitCode.HANG in (a.exit_code, b.exit_code) else max(a.exit_code, b.exit_code)
    return dataclasses.replace(
        a,
        verdict=verdict,
        exit_code=code,
        findings=a.findings + b.findings,
        ranks=a.ranks + tuple(r for r in b.ranks if r.rank not in {x.rank for x in a.ranks}),
        notes=a.notes + b.notes,
        run_dir=f"{a.run_dir}, {b.run_dir}",
        summary=a.summary if a.findings else b.summary,
    )
