"""``ddpdoctor attach``: a running job started without ddpdoctor, from its ranks' stacks."""

from __future__ import annotations

import sys

import click

from ddpdoctor.analysis.config import Config
from ddpdoctor.cli.options import GroupedCommand, output_options


@click.command(cls=GroupedCommand, short_help="Diagnose a running job started without ddpdoctor (py-spy).")
@click.option(
    "--pid",
    type=int,
    default=None,
    help="The job of this agent, spawn parent or rank.  [default: every job]",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1, max=60),
    default=1.0,
    show_default=True,
    metavar="S",
    help="Seconds between the two stack dumps.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    metavar="S",
    default=10.0,
    show_default=True,
    help="Seconds one py-spy dump may take.",
)
@click.option("--no-native", is_flag=True, help="Leave out native frames (their dump pauses a rank ~1 s).")
@click.option(
    "--fr-timeout",
    type=click.FloatRange(min=1, max=600),
    default=15.0,
    show_default=True,
    metavar="S",
    help="Seconds to take the flight recorder.",
)
@click.option(
    "--no-fr",
    is_flag=True,
    help="Stacks only: do not ask for the flight recorder.",
)
@click.option("--kill", is_flag=True, help="End the job afterwards.  [default: leave it running]")
@click.option(
    "--run-dir",
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="Records folder.  [default: ./ddpdoctor-runs/attach-TIME]",
)
@output_options
def attach(
    pid: int | None,
    interval: float,
    timeout: float,
    no_native: bool,
    fr_timeout: float,
    no_fr: bool,
    kill: bool,
    run_dir: str | None,
    json_path: str | None,
    junit_path: str | None,
    fail_on: str,
    select: tuple[str, ...] = (),
    ignore: tuple[str, ...] = (),
    html_path: str | None = None,
) -> None:
    """Diagnose a running DDP job started without ddpdoctor: every rank's stacks (py-spy), same findings as hang.

    Where the job offers a trigger (torch's debug server; NCCL's dump pipe), each rank's flight recorder too
    (docs/attach.md); else the report says in one line why it rests on stacks only.

    \b
    ddpdoctor attach                      # every torchrun / mp.spawn job of this user on this host
    ddpdoctor attach --pid 4242 --json -  # the job of this torchrun agent (or rank)
    Multi-node: run it on each node, then `ddpdoctor analyze DIR1 DIR2 ...`. Exit 2: no job found.
    """
    from ddpdoctor.analysis import diagnose
    from ddpdoctor.attach.session import attach as run_attach
    from ddpdoctor.attach.session import describe
    from ddpdoctor.attach.session import kill as end_job
    from ddpdoctor.cli.project import selection
    from ddpdoctor.launch.command import attach_pictures, check_html_path, check_writable, emit
    from ddpdoctor.postmortem.attached import with_flight_recorder
    from ddpdoctor.record.reader import load_run

    check_html_path(html_path)
    select, ignore = selection(select, ignore)
    check_writable(json_path)
    check_writable(junit_path)
    done = run_attach(
        pid,
        run_dir,
        interval,
        timeout,
        not no_native,
        several_ok=not (json_path or junit_path or html_path),
        fr_timeout=None if no_fr else fr_timeout,
    )
    code = 0
    for a in done:
        click.echo(
            f"ddpdoctor: attach: {describe(a.job)}; stacks read in {a.seconds:.1f} s; records in {a.run_dir}", err=True
        )
        record = load_run(a.run_dir)
        cfg = Config(timeout=interval, fail_on=fail_on, select=select, ignore=ignore)
        report = with_flight_recorder(diagnose(record, cfg, "attach"), [a.run_dir], fail_on, select, ignore, record)
        report = attach_pictures(report, record, ("html",), html_path)
        emit(report, json_path, junit_path)
        code = max(code, report.exit_code)
        if kill:
            end_job(a.job)
            click.echo(f"ddpdoctor: attach: ended {describe(a.job)}", err=True)
    sys.exit(code)
