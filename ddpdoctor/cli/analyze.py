"""``ddpdoctor analyze``: re-diagnose saved runs without re-running them (no torch import)."""

from __future__ import annotations

import sys

import click

from ddpdoctor.analysis.config import Config
from ddpdoctor.cli.options import output_options
from ddpdoctor.commands import spec_of
from ddpdoctor.errors import DdpdoctorError


@click.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path())
@click.option("--timeout", type=float, default=None, help="Re-judge with another --timeout (default: the run's own).")
@output_options
def analyze(run_dirs: tuple[str, ...], timeout: float | None, json_path: str | None, junit_path: str | None,
            fail_on: str, html_path: str | None = None) -> None:
    """Re-diagnose a saved run directory without re-running it (no torch needed).

    For a multi-node job give every node's run directory: the ranks are compared across nodes.
    """
    from ddpdoctor.analysis import diagnose
    from ddpdoctor.launch.command import attach_pictures, check_html_path, emit
    from ddpdoctor.record.reader import RunDirError, load_runs

    check_html_path(html_path)
    try:
        record = load_runs(list(run_dirs))
    except RunDirError as e:
        raise DdpdoctorError(str(e)) from None
    t = timeout if timeout is not None else float(record.manifest.get("timeout") or 60.0)
    command = str(record.manifest.get("command", "analyze"))
    spec = spec_of(command)
    report = attach_pictures(diagnose(record, Config(timeout=t, fail_on=fail_on), command), record,
                             spec.pictures if spec else (), html_path)
    emit(report, json_path, junit_path)
    sys.exit(report.exit_code)
