"""The ``ddpdoctor`` command line. Thin: options -> frozen config -> library calls.

``ddpdoctor --help`` and ``ddpdoctor analyze`` never import torch.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

import click

from ddpdoctor import __version__
from ddpdoctor.analysis.model import Config, ExitCode, Report
from ddpdoctor.errors import DdpdoctorError

TORCHRUN_OPTIONS = [
    ("--nproc-per-node", str, "Workers per node (torchrun). Default: the number of GPUs, else 2."),
    ("--nnodes", str, "Number of nodes, or MIN:MAX (torchrun)."),
    ("--node-rank", int, "This node's rank (torchrun, static rendezvous)."),
    ("--rdzv-backend", str, "Rendezvous backend (torchrun), e.g. c10d."),
    ("--rdzv-endpoint", str, "Rendezvous endpoint host:port (torchrun)."),
    ("--rdzv-id", str, "Rendezvous job id (torchrun)."),
    ("--master-addr", str, "Master address (torchrun, static rendezvous)."),
    ("--master-port", int, "Master port (torchrun, static rendezvous)."),
]


def torchrun_options(f: Callable) -> Callable:
    for name, typ, help_ in reversed(TORCHRUN_OPTIONS):
        f = click.option(name, type=typ, default=None, help=help_)(f)
    return f


def output_options(f: Callable) -> Callable:
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


def _default_nproc() -> str:
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and cvd.strip() not in ("", "-1"):
        return str(len([d for d in cvd.split(",") if d.strip()]))
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            n = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
        if n > 0:
            return str(n)
    except Exception:
        pass
    return "2"


def _torchrun_args(opts: dict[str, Any], spawn: bool) -> list[str]:
    nproc = opts.get("nproc_per_node")
    if nproc is not None and not (nproc.isdigit() and int(nproc) >= 1) and nproc not in ("auto", "cpu", "gpu"):
        raise DdpdoctorError(f"--nproc-per-node must be a number of at least 1, or auto/cpu/gpu (got {nproc})")
    args = ["--nproc-per-node", "1" if spawn else (nproc or _default_nproc())]
    multi = any(opts.get(k) is not None for k in ("nnodes", "node_rank", "rdzv_endpoint", "master_addr",
                                                   "master_port", "rdzv_backend"))
    for name, _t, _h in TORCHRUN_OPTIONS[1:]:
        v = opts.get(name.lstrip("-").replace("-", "_"))
        if v is not None:
            args += [name, str(v)]
    if not multi:
        args.append("--standalone")  # a free port on this host: parallel runs do not collide
    return args


def _probe_path(name: str) -> str:
    from importlib.resources import files

    return str(files("ddpdoctor.probes") / name)


def _check_writable(path: str | None) -> None:
    if path and path != "-":
        d = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(d) or not os.access(d, os.W_OK):
            raise DdpdoctorError(f"cannot write {path}: folder missing or not writable")


def emit(report: Report, json_path: str | None, junit_path: str | None, quiet_text: bool = False) -> None:
    from ddpdoctor.render import RENDERERS

    if not quiet_text:
        click.echo(RENDERERS["text"](report), err=json_path == "-", nl=False)
    for path, fmt in ((json_path, "json"), (junit_path, "junit")):
        if not path:
            continue
        data = RENDERERS[fmt](report)
        if path == "-":
            click.echo(data, nl=False)
            continue
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(data)
        except OSError as e:
            raise DdpdoctorError(f"cannot write {path}: {e.strerror}") from None


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


@cli.command()
@run_options
def hang(script: str | None, timeout: float, launch: str, run_dir: str | None, max_time: float | None,
         json_path: str | None, junit_path: str | None, fail_on: str, script_args: tuple[str, ...],
         **torchrun: Any) -> None:
    """Run a DDP script and report deadlocks, divergent collectives and crashes per rank and line.

    \b
    ddpdoctor hang --script train.py --nproc-per-node 2 -- --epochs 3
    """
    cfg = Config(timeout=timeout, fail_on=fail_on)
    report = run_command("hang", script, script_args, torchrun, launch, run_dir, max_time, cfg, json_path, junit_path)
    sys.exit(report.exit_code)


@cli.command()
@run_options
@click.option("--steps", type=click.IntRange(min=1), default=None,
              help="End the run once every rank has made this many DDP steps.")
@click.option("--epochs", type=click.IntRange(min=1), default=None,
              help="End the run once every rank has iterated its DataLoader this many times.")
@click.option("--fingerprint-every", type=click.IntRange(min=1), default=10, show_default=True,
              help="Fingerprint parameters and buffers every K DDP forwards (and at construction).")
def check(script: str | None, timeout: float, launch: str, run_dir: str | None, max_time: float | None,
          json_path: str | None, junit_path: str | None, fail_on: str, script_args: tuple[str, ...],
          steps: int | None, epochs: int | None, fingerprint_every: int, **torchrun: Any) -> None:
    """Check set_epoch, shard overlap, seeds, parameter/buffer drift, checkpoint races, no_sync.

    \b
    ddpdoctor check --script train.py --epochs 2
    """
    if steps and epochs:
        raise DdpdoctorError("give --steps or --epochs, not both")
    cfg = Config(timeout=timeout, fail_on=fail_on)
    report = run_command("check", script, script_args, torchrun, launch, run_dir, max_time, cfg, json_path,
                         junit_path, extra={"checks": {"every": fingerprint_every},
                                            "stop": {"steps": steps, "epochs": epochs}})
    sys.exit(report.exit_code)


def _attach_pictures(report: Report, record: Any, command: str) -> Report:
    """memleak: the memory picture; profile: the Perfetto trace. Written into the run directory."""
    import dataclasses
    import glob

    notes = list(report.notes)
    if command == "profile" and any(r.timeline for r in record.ranks.values()):
        from ddpdoctor.render.perfetto import render as render_trace

        path = os.path.join(record.run_dir, "trace.json")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(render_trace(record))
            notes.append(f"timeline (open in https://ui.perfetto.dev): {path}")
        except OSError as e:
            notes.append(f"could not write {path}: {e.strerror}")
        reports = sorted(glob.glob(os.path.join(record.run_dir, "nsys", "*.nsys-rep")))
        if reports:
            notes.append("Nsight Systems reports: " + ", ".join(reports))
        return dataclasses.replace(report, notes=tuple(notes))
    if command != "memleak" or not any(r.memory for r in record.ranks.values()):
        return report
    from ddpdoctor.render.svg import memory_svg

    path = os.path.join(record.run_dir, "memory.svg")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(memory_svg(record))
        notes.append(f"memory per rank per step: {path}")
    except OSError as e:
        notes.append(f"could not write {path}: {e.strerror}")
    if not any("cuda_allocated" in e for r in record.ranks.values() for e in r.memory):
        notes.append("no CUDA figures: no rank used a GPU (CPU RSS, live tensors and autograd graphs only)")
    return dataclasses.replace(report, notes=tuple(notes))


def run_command(command: str, script: str | None, script_args: tuple[str, ...], torchrun: dict[str, Any],
                launch: str, run_dir: str | None, max_time: float | None, cfg: Config,
                json_path: str | None, junit_path: str | None, quiet: bool = False,
                extra: dict[str, Any] | None = None, wrapper: tuple[str, ...] = ()) -> Report:
    from ddpdoctor.analysis import diagnose
    from ddpdoctor.launch import rundir as rd
    from ddpdoctor.launch.monitor import LaunchSpec, Monitor
    from ddpdoctor.launch.script import check_script, uses_mp_spawn
    from ddpdoctor.record.reader import load_run

    _check_writable(json_path)
    _check_writable(junit_path)
    script = script or _probe_path("healthy.py")
    tree = check_script(script)
    mode = launch if launch != "auto" else ("spawn" if uses_mp_spawn(tree) else "torchrun")
    targs = _torchrun_args(torchrun, mode == "spawn")
    stop = (extra or {}).get("stop") or {}
    path = rd.create(run_dir or rd.default_run_dir(command), {
        "command": command, "mode": mode, "script": script, "script_args": list(script_args),
        "torchrun_args": targs, "timeout": cfg.timeout, "heartbeat_s": cfg.heartbeat, **(extra or {})})
    if wrapper:  # nsys: one report per rank in the run directory (%q{RANK} is expanded by nsys)
        os.makedirs(os.path.join(path, "nsys"), mode=0o700, exist_ok=True)
        wrapper = tuple(os.path.join(path, "nsys", "rank%q{RANK}") if a == "NSYS_OUTPUT" else a for a in wrapper)
    spec = LaunchSpec(script, tuple(script_args), tuple(targs), mode, max_time, stop.get("steps"), stop.get("epochs"),
                      wrapper)
    if not quiet:
        click.echo(f"ddpdoctor: {command}: {script} under torchrun ({' '.join(targs)}), mode {mode}; "
                   f"records in {path}", err=True)
    outcome = Monitor(spec, path, cfg, live=not quiet, echo=not quiet).run()
    record = load_run(path)
    report = diagnose(record, cfg, command)
    report = _attach_pictures(report, record, command)
    if outcome.interrupted:
        report = Report(report.command, report.verdict, ExitCode.INTERRUPTED, report.run_dir, report.findings,
                        report.ranks, "interrupted", report.notes + ("interrupted: the run was ended early",))
    emit(report, json_path, junit_path, quiet_text=quiet)
    return report


@cli.command()
@run_options
@click.option("--steps", type=click.IntRange(min=1), default=None,
              help="End the run once every rank has made this many steps (optimizer steps, else DDP forwards).")
@click.option("--census-every", type=click.IntRange(min=1), default=None,
              help="Census live tensors and autograd graphs every K steps (default: as often as 2% of the "
                   "run's time allows, and at the first and last step).")
def memleak(script: str | None, timeout: float, launch: str, run_dir: str | None, max_time: float | None,
            json_path: str | None, junit_path: str | None, fail_on: str, script_args: tuple[str, ...],
            steps: int | None, census_every: int | None, **torchrun: Any) -> None:
    """Find memory that grows step after step: on which rank, in which layer, and why.

    \b
    ddpdoctor memleak --script train.py --steps 200
    """
    cfg = Config(timeout=timeout, fail_on=fail_on)
    report = run_command("memleak", script, script_args, torchrun, launch, run_dir, max_time, cfg, json_path,
                         junit_path, extra={"memory": {"census_every": census_every}, "stop": {"steps": steps}})
    sys.exit(report.exit_code)


@cli.command()
@run_options
@click.option("--steps", type=click.IntRange(min=1), default=None,
              help="End the run once every rank has made this many DDP steps.")
@click.option("--nsys", "use_nsys", is_flag=True,
              help="Run each rank under Nsight Systems (`nsys profile`), one report per rank, with ddpdoctor's "
                   "NVTX ranges.")
@click.option("--nsys-args", default="", help="Extra arguments for `nsys profile` (one string, split like a shell).")
def profile(script: str | None, timeout: float, launch: str, run_dir: str | None, max_time: float | None,
            json_path: str | None, junit_path: str | None, fail_on: str, script_args: tuple[str, ...],
            steps: int | None, use_nsys: bool, nsys_args: str, **torchrun: Any) -> None:
    """Where each rank's step time goes: step breakdown, stragglers, data-loader waits, NVTX for Nsight.

    \b
    ddpdoctor profile --script train.py --steps 200            # own timeline: trace.json (Perfetto)
    ddpdoctor profile --script train.py --nsys                 # plus one nsys report per rank
    """
    import shlex
    import shutil

    wrapper: tuple[str, ...] = ()
    if use_nsys:
        nsys = shutil.which("nsys")
        if nsys is None:
            raise DdpdoctorError("nsys (Nsight Systems) is not on PATH: install it from "
                                 "https://developer.nvidia.com/nsight-systems, or run `ddpdoctor profile` without "
                                 "--nsys for ddpdoctor's own timeline", ExitCode.NOT_RUN)
        try:
            extra_args = shlex.split(nsys_args)
        except ValueError as e:
            raise DdpdoctorError(f"--nsys-args: {e}") from None
        wrapper = (nsys, "profile", "-t", "cuda,nvtx,osrt", "--force-overwrite", "true", *extra_args, "-o",
                   "NSYS_OUTPUT")
    cfg = Config(timeout=timeout, fail_on=fail_on)
    report = run_command("profile", script, script_args, torchrun, launch, run_dir, max_time, cfg, json_path,
                         junit_path, extra={"profile": {"nsys": use_nsys}, "stop": {"steps": steps}},
                         wrapper=wrapper)
    sys.exit(report.exit_code)


@cli.command()
@click.option("--only", multiple=True, help="Run only these probes (file names, e.g. crash.py).")
@click.option("--run-dir", "runs_root", type=click.Path(file_okay=False),
              help="Folder for the probes' run directories (default ./ddpdoctor-runs/doctor-...).")
@output_options
def doctor(only: tuple[str, ...], runs_root: str | None, json_path: str | None, junit_path: str | None,
           fail_on: str) -> None:
    """Self-test: run every built-in probe and check each gives the finding its docstring names."""
    from ddpdoctor.selftest import run_selftest

    sys.exit(run_selftest(only, runs_root, json_path, junit_path))


@cli.command()
@click.argument("run_dir", type=click.Path())
@click.option("--timeout", type=float, default=None, help="Re-judge with another --timeout (default: the run's own).")
@output_options
def analyze(run_dir: str, timeout: float | None, json_path: str | None, junit_path: str | None, fail_on: str) -> None:
    """Re-diagnose a saved run directory without re-running it (no torch needed)."""
    from ddpdoctor.analysis import diagnose
    from ddpdoctor.record.reader import RunDirError, load_run

    try:
        record = load_run(run_dir)
    except RunDirError as e:
        raise DdpdoctorError(str(e)) from None
    t = timeout if timeout is not None else float(record.manifest.get("timeout") or 60.0)
    command = str(record.manifest.get("command", "analyze"))
    report = _attach_pictures(diagnose(record, Config(timeout=t, fail_on=fail_on), command), record, command)
    emit(report, json_path, junit_path)
    sys.exit(report.exit_code)


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
