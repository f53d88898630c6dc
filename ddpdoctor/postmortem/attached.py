"""The flight-recorder dumps ``ddpdoctor attach`` took from a running job (``<run dir>/fr/``), read with the
stacks of the same run directory: one report for ``attach`` and for ``analyze`` of its run directory.

The dumps say which collectives each rank made (the extra call on one rank, the rank the others wait for); the
stacks say where each rank is now, with its lines (a JSON dump from torch's debug server has none). Where both
name the same finding with the same culprits, the dumps' finding is kept with the stacks' lines added; any other
finding of either is kept as it is. Pure: no torch; the dumps are read with the post-mortem's safe reader.
"""

from __future__ import annotations

import dataclasses
import json
import os

from ddpdoctor.analysis.findings import Finding, Report, severity_rank
from ddpdoctor.analysis.ids import HANG_DIVERGENT_COLLECTIVE, HANG_EARLY_EXIT, HANG_RANK_CONDITIONAL_COLLECTIVE
from ddpdoctor.errors import DdpdoctorError
from ddpdoctor.record import schema


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
    report: Report, run_dirs: list[str], fail_on: str, select: tuple[str, ...] = (), ignore: tuple[str, ...] = ()
) -> Report:
    """``report`` (diagnosed from the stacks) with the dumps attach took, and its one line on them
    (``select``/``ignore``: --select/--ignore)."""
    from ddpdoctor.postmortem import command

    notes = [n for n in (fr_note(d) for d in run_dirs) if n]
    dirs = fr_dirs(run_dirs)
    fr: Report | None = None
    if dirs:
        try:
            fr, _ = command.analyze(dirs, fail_on, select, ignore)
        except DdpdoctorError as e:  # attach checked every dump it kept: one that no longer reads was changed
            notes.append(f"the flight-recorder dumps were not used: {e}")
    out = combine(report, fr) if fr is not None else report
    if fr is not None and not fr.findings:
        # nothing pending in any rank's ring: whatever the stacks show, the ranks are not stuck in a collective
        notes.append("the flight recorder shows every collective the ranks issued completed")
    return dataclasses.replace(out, notes=out.notes + tuple(notes))


DIVERGENT = HANG_DIVERGENT_COLLECTIVE
# what the stacks can tell a divergence is, where the dumps see only that the ranks' calls differ
KINDS = (HANG_EARLY_EXIT, HANG_RANK_CONDITIONAL_COLLECTIVE)


def combine(stacks: Report, fr: Report) -> Report:
    """One report of the stacks' diagnosis and the dumps' (verdict and exit code: the worse of the two)."""
    from ddpdoctor.postmortem.report import merge

    merged = merge(stacks, fr)
    errors = {f.id: f for f in fr.findings if f.severity == "error"}
    same: dict[str, Finding] = {}
    rest = []
    # the dumps' generic divergence (naming the same culprits, or none: two ranks' calls that differ) the
    # stacks' finding gives the kind and the side of (where a rank left the loop, or the extra call's line:
    # the dumps' JSON holds no lines): one finding, the stacks'
    generic = errors.get(DIVERGENT)
    told: Finding | None = None
    for f in stacks.findings:
        twin = errors.get(f.id)
        if twin is not None and set(twin.culprits) == set(f.culprits):
            same[f.id] = f
        elif (
            told is None
            and generic is not None
            and f.id in KINDS
            and f.culprits
            and (not generic.culprits or set(generic.culprits) == set(f.culprits))
        ):
            said = (
                "the flight recorder names the same ranks"
                if generic.culprits
                else "the flight recorder shows the ranks' calls differ there, without the lines to say which rank left"
            )
            told = dataclasses.replace(f, message=f"{f.message} ({said})")
            rest.append(told)
        else:
            rest.append(f)
    firsts = []
    for g in fr.findings:
        if told is not None and g is generic:
            continue
        agree = same.get(g.id)
        if agree is not None:
            have = {loc.rank for loc in g.locations}
            g = dataclasses.replace(
                g,
                message=f"{g.message} (from the flight recorder; the stacks agree)",
                locations=g.locations + tuple(loc for loc in agree.locations if loc.rank not in have),
            )
        firsts.append(g)
    # stable: the dumps' first, but within a severity a finding that names its culprits before one that
    # names none (the stacks see where a rank left the loop; the dumps alone may see two equal sides)
    found = sorted(firsts + rest, key=lambda f: (severity_rank(f.severity), not f.culprits))
    return dataclasses.replace(
        merged,
        findings=tuple(found),
        summary=found[0].message if found else merged.summary,
        run_dir=stacks.run_dir,
        notes=stacks.notes + tuple(n for n in fr.notes if not any(s in n for s in _ANSWERED)),
    )


# post-mortem notes (postmortem/detect.py) the stacks answer: each rank's line is in its stack, and attach read
# every local rank and the world size from the ranks' environment
_ANSWERED = ("the dump holds no Python stacks", "the dumps do not say how many ranks the job had")
