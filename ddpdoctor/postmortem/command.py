"""``ddpdoctor analyze`` on paths that are not ddpdoctor run directories: flight-recorder dumps,
torchrun error files and logs (any mix, with run directories too). Imports no torch."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Report
from ddpdoctor.analysis.hang.policy import Case
from ddpdoctor.errors import DdpdoctorError
from ddpdoctor.postmortem import inputs, report


def split(paths: list[str]) -> tuple[list[str], list[str]]:
    """(ddpdoctor run directories, everything else). A missing path stays with the run directories, whose
    loader says what is wrong with it as it always has."""
    runs = [p for p in paths if inputs.is_run_dir(p) or not _exists(p)]
    return runs, [p for p in paths if p not in runs]


def _exists(p: str) -> bool:
    import os

    return os.path.exists(p)


def analyze(
    paths: list[str],
    fail_on: str,
    select: tuple[str, ...] = (),
    ignore: tuple[str, ...] = (),
    more: Sequence[Case] = (),
) -> tuple[Report | None, list[str]]:
    """The post-mortem report of ``paths`` and the run directories found inside them. DdpdoctorError
    (exit 2, one line) for bad input: a truncated or foreign dump, a pickle that refers to code.
    ``select``/``ignore``: --select/--ignore; ``more``: other evidence of the same job judged with the dumps."""
    try:
        inp = inputs.load(paths)
    except inputs.InputError as e:
        raise DdpdoctorError(str(e)) from None
    if inp.empty():
        return None, inp.run_dirs
    return report.build(inp, Config(fail_on=fail_on, select=select, ignore=ignore), more), inp.run_dirs


def with_html(rep: Report, html_path: str | None) -> Report:
    """``--html FILE`` for a post-mortem: the page from the report alone (there is no run record)."""
    if not html_path:
        return rep
    from ddpdoctor.render.html.page import render

    try:
        with open(html_path, "w", encoding="utf-8") as f:
            f.write(render(rep))
    except OSError as e:
        raise DdpdoctorError(f"cannot write {html_path}: {e.strerror}") from None
    return dataclasses.replace(rep, notes=rep.notes + (f"HTML report: {html_path}",))


merge = report.merge
