"""The flight-recorder dumps ``ddpdoctor attach`` took from a running job (``<run dir>/fr/``), read with the
stacks of the same run directory: one report for ``attach`` and for ``analyze`` of its run directory.

The dumps say which collectives each rank made (the extra call on one rank, the rank the others wait for); the
stacks say where each rank is now, with its lines (a JSON dump from torch's debug server has none). Both are one
evidence, judged once by the one policy (analysis/hang/policy.py): no report is weighed against another. Pure: no torch; the dumps are read with the post-mortem's safe reader.
"""

from __future__ import annotations

import dataclasses
import json
import os

from ddpdoctor.analysis.findings import Finding, Report, severity_rank
from ddpdoctor.analysis.ids import ATTACH_RUNNING
from ddpdoctor.errors import DdpdoctorError
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord


def fr_note(run_dir: str) -> str | None:
    """The attach run directory's one line on the flight recorder (manifest ``attach.fr.note``); None where
    ``run_dir`` is not an attach run directory or predates it."""
    try:
        with open(os.path.join(run_dir, schema.MANIFEST), encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("command") != schema.CMD_ATTACH:
        return None
    fr = (manifest.get("attach") or {}).get("fr")
    return str(fr.get("note") or "") if isinstance(fr, dict) else None


def fr_dirs(run_dirs: list[str]) -> list[str]:
    """The ``fr/`` folders of the attach run directories that hold taken dumps."""
    out = []
    for d in run_dirs:
        p = os.path.join(d, schema.FR_DIR)
        if fr_note(d) is not None and os.path.isdir(p) and os.listdir(p):
            out.append(p)
    return out


def with_flight_recorder(
    report: Report,
    run_dirs: list[str],
    fail_on: str,
    select: tuple[str, ...] = (),
    ignore: tuple[str, ...] = (),
    record: RunRecord | None = None,
) -> Report:
    """``report`` (the diagnosis of the attach run directory ``record``) with the dumps attach took judged
    together with its stacks: the dumps' case and the stacks' case are one evidence the one policy is asked of
    (analysis/hang/policy.py), so the hang finding is the strongest answer either source gives, with what the
    other adds (the stacks' lines, the dumps' groups and positions); the stacks' own judgement is replaced by
    it, never weighed against it afterwards. ``select``/``ignore``: --select/--ignore."""
    from ddpdoctor.analysis.hang.attach import StackCase, views
    from ddpdoctor.postmortem import command

    notes = [n for n in (fr_note(d) for d in run_dirs) if n]
    dirs = fr_dirs(run_dirs)
    vs = views(record) if record is not None else {}
    stacks = StackCase(record, vs) if record is not None and vs else None
    fr: Report | None = None
    if dirs:
        try:
            fr, _ = command.analyze(dirs, fail_on, select, ignore, more=(stacks,) if stacks else ())
        except DdpdoctorError as e:  # attach checked every dump it kept: one that no longer reads was changed
            notes.append(f"the flight-recorder dumps were not used: {e}")
    out = report
    if fr is not None:
        from ddpdoctor.postmortem.report import merge

        # the stacks' judgement is in the dumps' report now (judged as one evidence): the stacks' own goes
        own = tuple(f for f in report.findings if not _from_stacks(f)) if stacks is not None else report.findings
        # stable: the joint judgement first, but within a severity a finding that names its culprits before one
        # that names none
        found = tuple(sorted(fr.findings + own, key=lambda f: (severity_rank(f.severity), not f.culprits)))
        merged = merge(dataclasses.replace(report, findings=()), fr)
        out = dataclasses.replace(
            merged,
            findings=found,
            summary=found[0].message if found else merged.summary,
            run_dir=report.run_dir,
            notes=report.notes + tuple(n for n in fr.notes if not any(a in n for a in _ANSWERED)),
        )
        if not any(r.state == "waiting" for r in fr.ranks):
            # nothing pending in any rank's ring: whatever the stacks show, the ranks are not stuck in a collective
            notes.append("the flight recorder shows every collective the ranks issued completed")
    return dataclasses.replace(out, notes=out.notes + tuple(notes))


def _from_stacks(f: Finding) -> bool:
    """A finding of the stacks' case (analysis/hang/attach.py), which the joint judgement replaces."""
    return f.id == ATTACH_RUNNING or str(f.evidence.get("source", "")).startswith("stacks (py-spy)")


# post-mortem notes (postmortem/detect.py) the stacks answer: each rank's line is in its stack, and attach read
# every local rank and the world size from the ranks' environment
_ANSWERED = ("the dump holds no Python stacks", "the dumps do not say how many ranks the job had")
