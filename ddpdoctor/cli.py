"""The ``ddpdoctor`` command line. Thin: options -> frozen config -> library calls.

``ddpdoctor --help`` and ``ddpdoctor analyze`` never import torch.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import click

from ddpdoctor import __version__
from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import ExitCode
from ddpdoctor.errors import DdpdoctorError
from ddpdoctor.commands import COMMANDS, CommandSpec, spec_of
from ddpdoctor.launch.command import TORCHRUN_OPTIONS, attach_pictures, emit, run_params



def torchrun_options(f: Callable) -> Callable:
    for name, typ, help_ in reversed(TORCHRUN_OPTIONS):
        f = click.option(name, type=typ, default=None, help=help_)(f)
    return f


def output_options(f: Callable) -> Callable:
    f = click.option("--html", "html_path", type=click.Path(dir_okay=False),
                     help="Write the HTML report here too (one self-contained file; every run directory "
                          "holds report.html).")(f)
    f = click.option("--junit", "junit_path", type=click.Path(dir_okay=False), help="Write a JUnit XML report.")(f)
    f = click.option("--json", "json_path", type=click.Path(dir_okay=False),
                     help="Write the JSON report (docs/json-schema.md); '-' for stdout.")(f)
    f = click.option("--fail-on", type=click.Choice(["error", "warning", "note"]), default="error",
                     show_default=True, help="Lowest finding severity that gives a non-zero exit code.")(f)
    return f


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="ddpdoctor")
def cli() -> None:
    """Run a PyTorch DDP script under torchrun with probes in every rank, and say what is wrong:
    on which rank, at which line, and what to do.

    \b
    Exit codes: 0 healthy, 1 findings, 2 usage or bad input, 3 hang or divergence,
                4 could not run, 5 internal error, 130 interrupted.
    """


def run_options(f: Callable) -> Callable:
    """The options every command that runs a script shares."""
    f = click.argument("script_args", nargs=-1, type=click.UNPROCESSED)(f)
    f = output_options(f)
    f = click.option("--max-time", type=click.FloatRange(min=1), default=None,
                     help="End the run after this many seconds.")(f)
    f = click.option("--run-dir", type=click.Path(file_okay=False),
                     help="Where to keep the records (default ./ddpdoctor-runs/...).")(f)
    f = click.option("--launch", type=click.Choice(["auto", "torchrun", "spawn"]), default="auto", show_default=True,
                     help="spawn: the script starts its own ranks with torch.multiprocessing.spawn; auto detects it.")(f)
    f = click.option("--timeout", type=click.FloatRange(min=0.5), default=60.0, show_default=True,
                     help="Seconds a rank may wait in a collective while another is still busy before it is called "
                          "a hang. Certain deadlocks are reported within seconds whatever this is.")(f)
    f = torchrun_options(f)
    f = click.option("--script", type=click.Path(dir_okay=False),
                     help="The training script. Default: the built-in healthy probe.")(f)
    return f


def _run_command(spec: CommandSpec) -> click.Command:
    """The click command of one spec: the options every run shares, then the spec's own."""

    def callback(**params: Any) -> None:
        sys.exit(run_params(spec, params).exit_code)

    for opt in reversed(spec.options):
        callback = click.option(*opt.decls, **opt.kwargs)(callback)
    callback.__doc__ = spec.help
    return click.command(name=spec.name)(run_options(callback))


for _spec in COMMANDS.values():
    cli.add_command(_run_command(_spec))


@cli.command()
@click.option("--skip-probes", is_flag=True, help="Leave out the self-test of the built-in probes.")
@click.option("--skip-health", is_flag=True, help="Leave out the health check (environment, collectives, bandwidth).")
@click.option("--only", multiple=True, help="Run only these probes (file names, e.g. crash.py).")
@click.option("--min-busbw", type=click.FloatRange(min=0), default=None, metavar="GBPS",
              help="Fail when all_reduce's bus bandwidth at the largest size is below this (GB/s, nccl-tests' busbw).")
@click.option("--sizes", default=None, metavar="LIST",
              help="Bandwidth sweep sizes, e.g. 64K,1M,16M (default: 64K,1M,16M on gloo; 1M..512M on nccl).")
@click.option("--backend", type=click.Choice(["auto", "gloo", "nccl"]), default="auto", show_default=True,
              help="Backend of the health check (auto: nccl where a GPU is, else gloo).")
@click.option("--timeout", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Seconds a rendezvous or a collective may take before it fails (the whole health check is "
                   "bounded by 3x this + 60 s).")
@torchrun_options
@click.option("--run-dir", "runs_root", type=click.Path(file_okay=False),
              help="Folder for the run directories (default ./ddpdoctor-runs/doctor-...).")
@output_options
def doctor(skip_probes: bool, skip_health: bool, only: tuple[str, ...], min_busbw: float | None,
           sizes: str | None, backend: str, timeout: float, runs_root: str | None, json_path: str | None,
           junit_path: str | None, fail_on: str, **torchrun: Any) -> None:
    """Health check of this machine or cluster, then the self-test of the built-in probes.

    \b
    environment: Python, torch, CUDA/NCCL/cuDNN, GPUs (NVML), backends, network interfaces and
                 GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME, /dev/shm, open-files limit, MASTER_ADDR
    collectives: all_reduce (sum, max), all_gather, reduce_scatter, broadcast, all_to_all, barrier,
                 send/recv; float32, int64, bfloat16; correct result on every rank
    bandwidth:   algbw and busbw (nccl-tests' definitions) over a sweep of sizes, the slowest rank
    probes:      every built-in probe gives the finding its docstring names (--skip-probes: not run)

    \b
    ddpdoctor doctor --skip-probes --min-busbw 100 --json health.json
    ddpdoctor doctor --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500 --skip-probes
    """
    from ddpdoctor.selftest import run_doctor

    size_list = None
    if sizes:
        from ddpdoctor.health.run import parse_sizes

        try:
            size_list = parse_sizes(sizes)
        except ValueError as e:
            raise DdpdoctorError(f"--sizes: {e}") from None
    sys.exit(run_doctor(only, runs_root, json_path, junit_path, fail_on=fail_on, skip_probes=skip_probes,
                        skip_health=skip_health, torchrun=torchrun, backend=backend, timeout=timeout,
                        sizes=size_list, min_busbw=min_busbw))


@cli.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path())
@click.option("--timeout", type=float, default=None, help="Re-judge with another --timeout (default: the run's own).")
@output_options
def analyze(run_dirs: tuple[str, ...], timeout: float | None, json_path: str | None, junit_path: str | None,
            fail_on: str, html_path: str | None = None) -> None:
    """Re-diagnose a saved run directory without re-running it (no torch needed).

    For a multi-node job give every node's run directory: the ranks are compared across nodes.
    Jobs not run under ddpdoctor: give torch's flight-recorder dumps (pickle or JSON), torchrun error files,
    torchrun's log folder or the job's log, in any mix (docs/postmortem.md).
    """
    from ddpdoctor.analysis import diagnose
    from ddpdoctor.launch.command import check_html_path
    from ddpdoctor.postmortem import command as postmortem
    from ddpdoctor.record.reader import RunDirError, load_runs

    check_html_path(html_path)
    dirs, others = postmortem.split(list(run_dirs))
    pm, found = postmortem.analyze(others, fail_on) if others else (None, [])
    dirs += found
    if not dirs and pm is not None:
        pm = postmortem.with_html(pm, html_path)
        emit(pm, json_path, junit_path)
        sys.exit(pm.exit_code)
    try:
        record = load_runs(dirs)
    except RunDirError as e:
        raise DdpdoctorError(str(e)) from None
    t = timeout if timeout is not None else float(record.manifest.get("timeout") or 60.0)
    command = str(record.manifest.get("command", "analyze"))
    report = attach_pictures(diagnose(record, Config(timeout=t, fail_on=fail_on), command), record,
                             spec_of(command), html_path)
    if pm is not None:
        report = postmortem.merge(report, pm)
    emit(report, json_path, junit_path)
    sys.exit(report.exit_code)



@cli.command()
@click.option("--pid", type=int, default=None,
              help="A torchrun agent, an mp.spawn parent or any rank of the job. Default: every torchrun/mp.spawn "
                   "job of this user on this host.")
@click.option("--interval", type=click.FloatRange(min=0.1, max=60), default=1.0, show_default=True,
              help="Seconds between the two stack dumps (a rank whose stack did not change is stuck).")
@click.option("--timeout", type=click.FloatRange(min=1), default=10.0, show_default=True,
              help="Seconds one py-spy dump may take.")
@click.option("--no-native", is_flag=True, help="Leave out the native frames (their dump pauses a stuck rank ~1 s).")
@click.option("--kill", is_flag=True, help="End the job afterwards (launcher first; TERM, then KILL). Default: leave it running.")
@click.option("--run-dir", type=click.Path(file_okay=False), help="Where to keep the records (default ./ddpdoctor-runs/attach-...).")
@output_options
def attach(pid: int | None, interval: float, timeout: float, no_native: bool, kill: bool, run_dir: str | None,
           json_path: str | None, junit_path: str | None, fail_on: str, html_path: str | None = None) -> None:
    """Diagnose a running DDP job started without ddpdoctor: every rank's stacks (py-spy), same findings as hang.

    \b
    ddpdoctor attach                      # every torchrun / mp.spawn job of this user on this host
    ddpdoctor attach --pid 4242 --json -  # the job of this torchrun agent (or rank)
    Multi-node: run it on each node, then `ddpdoctor analyze DIR1 DIR2 ...`. Exit 2: no job found.
    """
    import types

    from ddpdoctor.analysis import diagnose
    from ddpdoctor.attach.session import attach as run_attach, describe, kill as end_job
    from ddpdoctor.launch.command import check_html_path, check_writable
    from ddpdoctor.record.reader import load_run

    check_html_path(html_path)
    check_writable(json_path)
    check_writable(junit_path)
    done = run_attach(pid, run_dir, interval, timeout, not no_native,
                      several_ok=not (json_path or junit_path or html_path))
    code = 0
    for a in done:
        click.echo(f"ddpdoctor: attach: {describe(a.job)}; stacks read in {a.seconds:.1f} s; records in {a.run_dir}",
                   err=True)
        record = load_run(a.run_dir)
        report = attach_pictures(diagnose(record, Config(timeout=interval, fail_on=fail_on), "attach"), record,
                                 types.SimpleNamespace(pictures=("html",)), html_path)  # type: ignore[arg-type]
        emit(report, json_path, junit_path)
        code = max(code, report.exit_code)
        if kill:
            end_job(a.job)
            click.echo(f"ddpdoctor: attach: ended {describe(a.job)}", err=True)
    sys.exit(code)


@cli.command()
@click.argument("base", type=click.Path(dir_okay=False))
@click.argument("new", type=click.Path(dir_okay=False))
@click.option("--max-step-time-regression", "max_step", type=click.FloatRange(min=0), default=None, metavar="PCT",
              help="A rank whose steady-state step time grew by more than PCT percent is a regression (default 10).")
@click.option("--max-memory-slope-regression", "max_slope", default=None, metavar="BYTES",
              help="A rank whose RSS or CUDA growth per step rose by more than this (e.g. 64K, 1M) is a "
                   "regression (default 64K).")
def compare(base: str, new: str, max_step: float | None, max_slope: str | None) -> None:
    """Compare two JSON reports (profile: step time per rank and phase; memleak: memory growth per step).

    \b
    Exit 0: no regression; 1: a regression; 2: bad input.
    ddpdoctor profile --script train.py --steps 50 --json new.json
    ddpdoctor compare base.json new.json --max-step-time-regression 10
    """
    from ddpdoctor.compare import compare as run_compare, parse_bytes

    result = run_compare(base, new, max_step, parse_bytes(max_slope) if max_slope is not None else None)
    click.echo("\n".join(result.lines))
    sys.exit(result.exit_code)

def main(argv: list[str] | None = None) -> None:
    """Console entry point: one line and an exit code for every user error."""
    try:
        rv = cli.main(args=argv, prog_name="ddpdoctor", standalone_mode=False)
        sys.exit(rv if isinstance(rv, int) else 0)
    except DdpdoctorError as e:
        click.echo(f"ddpdoctor: error: {e}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("ddpdoctor: interrupted", err=True)
        sys.exit(ExitCode.INTERRUPTED)
    except click.ClickException as e:
        click.echo(f"ddpdoctor: error: {e.format_message()} (see --help)", err=True)
        sys.exit(ExitCode.USAGE)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        click.echo("ddpdoctor: interrupted", err=True)
        sys.exit(ExitCode.INTERRUPTED)
    except Exception:
        import traceback

        traceback.print_exc()
        click.echo("ddpdoctor: internal error (a bug in ddpdoctor; please report the traceback above)", err=True)
        sys.exit(ExitCode.INTERNAL)
