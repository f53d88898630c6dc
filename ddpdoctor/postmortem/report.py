"""The Report of a post-mortem: concluded by ``analysis.registry.conclude``, the one way to a Report (the
verdict and exit code by the catalog), so ``--json``/``--junit`` and the exit-code table mean the same; and the
merge of a run directory's report with a post-mortem of other records. Pure: no torch."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Report
from ddpdoctor.analysis.hang.policy import Case
from ddpdoctor.postmortem import detect
from ddpdoctor.postmortem.inputs import Inputs


def build(inp: Inputs, config: Config, more: Sequence[Case] = ()) -> Report:
    """The post-mortem of what ``inp`` holds, concluded as a run directory's diagnosis is
    (``registry.conclude``: the same order, ``--select``/``--ignore`` and verdict by the catalog). ``more``:
    other evidence of the same job (attach's stacks), judged with the dumps of one job as one."""
    from ddpdoctor.analysis.registry import conclude
    from ddpdoctor.postmortem.inputs import jobs, no_gc

    parts = jobs(inp)
    with no_gc():
        # other evidence of the job (attach's stacks, taken with its dumps at one moment) is the newest job's
        judged = [detect.findings(p, more if k == len(parts) - 1 else ()) for k, p in enumerate(parts)]
    if len(judged) == 1:
        found, ranks, notes = judged[0]
    else:
        # the dumps of several jobs (or attempts) in one folder: each judged on its own records, never one
        # job's healthy dumps read over another's hang
        found, ranks, notes = [], [], [detect.several_jobs(parts)]
        for k, (f, rl, n) in enumerate(judged, 1):
            tag = detect.job_tag(k, parts[k - 1])
            found += [dataclasses.replace(x, message=f"{tag}: {x.message}") for x in f]
            ranks += [dataclasses.replace(x, detail=f"{tag}: {x.detail}") for x in rl]
            notes += [f"{tag}: {x}" for x in n]
            if not any(x.severity == "error" for x in f):
                notes.append(f"{tag}: no error in its dumps")
    return conclude(found, config, command="analyze", run_dir=", ".join(inp.paths), ranks=ranks, notes=notes)


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
