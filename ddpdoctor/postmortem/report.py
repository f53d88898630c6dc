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
    """(verdict, exit code) by the catalog, as ``diagnose`` picks them (``registry.verdict_of``: could not
    run, then hang, then crash, then other findings), with the one fact of the evidence an id's entry cannot
    hold: a rank that left no dump while other ranks wait for it makes a hang (the entry says crash: a rank
    that left no dump and kept nobody waiting)."""
    from ddpdoctor.analysis.catalog import VERDICT_RANK
    from ddpdoctor.analysis.registry import verdict_of as by_catalog

    verdict, code = by_catalog(findings, fail_on)
    waited_for = any(
        f.id == "postmortem.no-dump" and f.severity == "error" and f.evidence.get("waiting") for f in findings
    )
    if waited_for and VERDICT_RANK["hang"] < VERDICT_RANK[verdict]:
        return "hang", ExitCode.HANG
    return verdict, code


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
    from ddpdoctor.analysis.catalog import VERDICT_RANK

    # the catalog's order of verdicts (the one copy, as diagnose and verdict_of use it): the worse report's
    # verdict and exit code; of two equal verdicts the lower code (could not run: bad input 2 before 4), but
    # of two OKs the higher (--fail-on made one of them fail)
    worse = min((a, b), key=lambda r: VERDICT_RANK.get(r.verdict, VERDICT_RANK["findings"]))
    verdict = worse.verdict
    if a.verdict != b.verdict:
        code = worse.exit_code
    elif verdict == "ok":
        code = max(a.exit_code, b.exit_code)
    else:
        code = min(a.exit_code, b.exit_code)
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
