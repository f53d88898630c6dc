"""``ddpdoctor analyze``: re-diagnose saved runs without re-running them (no torch import)."""

from __future__ import annotations

import dataclasses
import sys

import click

from ddpdoctor.analysis.config import Config
from ddpdoctor.cli.options import GroupedCommand, output_options
from ddpdoctor.commands import spec_of
from ddpdoctor.errors import DdpdoctorError


@click.command(cls=GroupedCommand, short_help="Re-diagnose saved runs, torch's dumps and logs (no torch).")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path())
@click.option(
    "--timeout", type=float, metavar="S", default=None, help="Re-judge with another --timeout.  [default: the run's]"
)
@output_options
def analyze(
    run_dirs: tuple[str, ...],
    timeout: float | None,
    json_path: str | None,
    junit_path: str | None,
    fail_on: str,
    select: tuple[str, ...] = (),
    ignore: tuple[str, ...] = (),
    html_path: str | None = None,
) -> None:
    """Re-diagnose a saved run directory without re-running it (no torch needed).

    For a multi-node job give every node's run directory: the ranks are compared across nodes.
    Jobs not run under ddpdoctor: give torch's flight-recorder dumps (pickle or JSON), torchrun error files,
    torchrun's log folder or the job's log, in any mix (docs/postmortem.md).

    \b
    ddpdoctor analyze ddpdoctor-runs/hang-20260101-120000-4242
    ddpdoctor analyze node0-run node1-run --json report.json
    ddpdoctor analyze /shared/fr-dumps/ torchrun-logs/ --ignore crash
    """
    from ddpdoctor.analysis import diagnose
    from ddpdoctor.analysis.wellformed import screen
    from ddpdoctor.cli.project import selection
    from ddpdoctor.launch.command import attach_pictures, check_html_path, emit
    from ddpdoctor.postmortem import command as postmortem
    from ddpdoctor.record.mirror import load_runs
    from ddpdoctor.record.reader import RunDirError

    check_html_path(html_path)
    select, ignore = selection(select, ignore)
    dirs, others = postmortem.split(list(run_dirs))
    pm, found = postmortem.analyze(others, fail_on, select, ignore) if others else (None, [])
    dirs += found
    if not dirs and pm is not None:
        pm = postmortem.with_html(pm, html_path)
        emit(pm, json_path, junit_path)
        sys.exit(pm.exit_code)
    if not dirs:  # nothing the post-mortem could use, and no run directory either
        raise DdpdoctorError(f"{', '.join(run_dirs)}: no ddpdoctor run directory and nothing a post-mortem can read")
    try:
        record = load_runs(dirs)
    except RunDirError as e:
        raise DdpdoctorError(str(e)) from None
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:
        # a record the loaders fold as they read (the ledger's positions) has a field of the wrong kind: the
        # run directory is damaged, said in one line (exit 2), never an internal error
        raise DdpdoctorError(f"{', '.join(dirs)}: a damaged record ({type(e).__name__}: {e})") from None
    # damaged records set aside for the pictures too; diagnose says which (analysis/wellformed.py)
    record, damaged = screen(record)
    t = timeout if timeout is not None else float(record.manifest.get("timeout") or 60.0)
    command = str(record.manifest.get("command", "analyze"))
    spec = spec_of(command)
    report = diagnose(record, Config(timeout=t, fail_on=fail_on, select=select, ignore=ignore), command)
    report = dataclasses.replace(report, notes=tuple(damaged) + tuple(report.notes)) if damaged else report
    if command == "attach":  # the flight-recorder dumps attach took, with the stacks (postmortem/attached.py)
        from ddpdoctor.postmortem.attached import with_flight_recorder

        report = with_flight_recorder(report, dirs, fail_on, select, ignore, record)
    report = attach_pictures(report, record, spec.pictures if spec else (), html_path)
    if pm is not None:
        report = postmortem.merge(report, pm)
    emit(report, json_path, junit_path)
    sys.exit(report.exit_code)
