"""Running one command end to end: check the input, create the run directory, launch and monitor
torchrun, diagnose the record, write the pictures, render the reports. The CLI is a thin layer over this."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any

import click

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Report
from ddpdoctor.commands import CommandSpec
from ddpdoctor.errors import DdpdoctorError, ExitCode
from ddpdoctor.launch.timings import Timings
from ddpdoctor.record import schema

# (option, type, metavar, one line of help): passed to torchrun as they are
TORCHRUN_OPTIONS = [
    ("--nproc-per-node", str, "N|auto|cpu|gpu", "Workers per node.  [default: the GPUs, else 2]"),
    ("--nnodes", str, "N|MIN:MAX", "Number of nodes."),
    ("--node-rank", int, "N", "This node's rank (static rendezvous)."),
    ("--rdzv-backend", str, "NAME", "Rendezvous backend, e.g. c10d."),
    ("--rdzv-endpoint", str, "HOST:PORT", "Rendezvous endpoint."),
    ("--rdzv-id", str, "ID", "Rendezvous job id."),
    ("--master-addr", str, "HOST", "Master address (static rendezvous)."),
    ("--master-port", int, "PORT", "Master port (static rendezvous)."),
    ("--max-restarts", int, "N", "Restart the worker group up to N times on a failure (elastic)."),
]


def _default_nproc() -> str:
    """The GPUs of the SLURM step on this node (SLURM_GPUS_ON_NODE), else CUDA_VISIBLE_DEVICES', else the
    driver's, else 2."""
    from ddpdoctor.launch.launchers import default_nproc

    if (n := default_nproc(os.environ)) is not None:
        return n
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


def torchrun_args(opts: dict[str, Any], spawn: bool) -> list[str]:
    nproc = opts.get("nproc_per_node")
    if nproc is not None and not (nproc.isdigit() and int(nproc) >= 1) and nproc not in ("auto", "cpu", "gpu"):
        raise DdpdoctorError(f"--nproc-per-node must be a number of at least 1, or auto/cpu/gpu (got {nproc})")
    args = ["--nproc-per-node", "1" if spawn else (nproc or _default_nproc())]
    if not spawn:  # srun, a PyTorchJob: the multi-node options from the launcher's environment
        from ddpdoctor.launch.launchers import from_environment, step_port_conflict

        opts = from_environment(opts, os.environ)[0]
        if conflict := step_port_conflict(opts, os.environ):
            raise DdpdoctorError(conflict)
    multi = any(
        opts.get(k) is not None
        for k in ("nnodes", "node_rank", "rdzv_endpoint", "master_addr", "master_port", "rdzv_backend")
    )
    for name, *_ in TORCHRUN_OPTIONS[1:]:
        v = opts.get(name.lstrip("-").replace("-", "_"))
        if v is not None:
            args += [name, str(v)]
    if not multi:
        args.append("--standalone")  # a free port on this host: parallel runs do not collide
    return args


def probe_path(name: str) -> str:
    from importlib.resources import files

    return str(files("ddpdoctor.probes") / name)


def check_writable(path: str | None) -> None:
    if path and path != "-":
        d = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(d) or not os.access(d, os.W_OK):
            raise DdpdoctorError(f"cannot write {path}: folder missing or not writable")


def check_html_path(path: str | None) -> None:
    if path == "-":
        raise DdpdoctorError("--html needs a file name (the HTML report does not go to standard output)")
    check_writable(path)


def emit(report: Report, json_path: str | None, junit_path: str | None, quiet_text: bool = False) -> None:
    from ddpdoctor.render import RENDERERS

    if not quiet_text:
        click.echo(RENDERERS["text"](report), err="-" in (json_path, junit_path), nl=False)
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


def _write_private(path: str, text: str, what: str) -> str:
    """Write a file of the run directory (0600) and return the report's note about it."""
    # written beside it, then renamed over it: a reader (a browser, a second `analyze` of the same run)
    # sees the old file or the new one, never a half-written one
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
        return f"{what}: {path}"
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return f"could not write {path}: {e.strerror}"


def attach_pictures(report: Report, record: Any, pictures: tuple[str, ...], html_path: str | None = None) -> Report:
    """Write the ``pictures`` (render.pictures names, from the command's spec) into the run directory; note each.
    A picture drawn from the report too (report.html) sees the notes of the pictures before it.
    ``html_path`` (``--html FILE``): the HTML report written there as well."""
    import glob

    from ddpdoctor.render.pictures import PICTURES

    notes = list(report.notes)
    reports = sorted(glob.glob(os.path.join(record.run_dir, schema.NSYS_DIR, "*.nsys-rep")))
    if reports:
        notes.append("Nsight Systems reports: " + ", ".join(reports))
    for name in pictures:
        pic = PICTURES[name]
        if pic.applies(record):
            text = pic.make(record, dataclasses.replace(report, notes=tuple(notes)))
            notes.append(_write_private(os.path.join(record.run_dir, pic.filename), text, pic.note))
            if remark := pic.remark(record):
                notes.append(remark)
    if html_path:
        text = PICTURES["html"].make(record, dataclasses.replace(report, notes=tuple(notes)))
        try:
            with open(html_path, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            raise DdpdoctorError(f"cannot write {html_path}: {e.strerror}") from None
        notes.append(f"HTML report: {html_path}")
    return dataclasses.replace(report, notes=tuple(notes)) if notes != list(report.notes) else report


TORCHRUN_KEYS = {name.lstrip("-").replace("-", "_") for name, *_ in TORCHRUN_OPTIONS}
_COMMON = (
    "timeout",
    "launch",
    "run_dir",
    "max_time",
    "json_path",
    "junit_path",
    "fail_on",
    "html_path",
    "job_store",
    "verbose",
    "select",
    "ignore",
)


def run_params(spec: CommandSpec, params: dict[str, Any], quiet: bool = False) -> Report:
    """Run a command from its click parameters (the CLI, and ``doctor`` parsing a probe's options)."""
    from ddpdoctor.cli.options import run_command as click_command
    from ddpdoctor.cli.options import split_script

    p = dict(params)
    script, script_args = split_script(click_command(spec), p)
    common = {k: p.pop(k, None) for k in _COMMON}
    torchrun = {k: p.pop(k) for k in list(p) if k in TORCHRUN_KEYS}
    cfg = Config(
        timeout=float(common["timeout"] or 60.0),
        fail_on=common["fail_on"] or "error",
        select=tuple(common["select"] or ()),
        ignore=tuple(common["ignore"] or ()),
    )
    return run_command(
        spec,
        p,
        script,
        script_args,
        torchrun,
        common["launch"] or "auto",
        common["run_dir"],
        common["max_time"],
        cfg,
        common["json_path"],
        common["junit_path"],
        quiet=quiet,
        html_path=common["html_path"],
        job_store=common["job_store"],
        verbose=bool(common["verbose"]),
    )


def run_command(
    spec: CommandSpec,
    values: dict[str, Any],
    script: str,
    script_args: tuple[str, ...],
    torchrun: dict[str, Any],
    launch: str,
    run_dir: str | None,
    max_time: float | None,
    cfg: Config,
    json_path: str | None,
    junit_path: str | None,
    quiet: bool = False,
    html_path: str | None = None,
    job_store: str | None = None,
    verbose: bool = False,
) -> Report:
    """Run ``script`` under torchrun for ``spec`` with its option ``values``; diagnose, render, return.
    ``job_store``: --job-store HOST:PORT (multi-node), before $DDPDOCTOR_JOB_STORE. A node of a job that
    another node judged prints one line pointing at the judge's report, unless ``verbose``."""
    from ddpdoctor.analysis import diagnose
    from ddpdoctor.launch import rundir as rd
    from ddpdoctor.launch.monitor import LaunchSpec, Monitor
    from ddpdoctor.launch.script import check_script, trainer_devices, uses_mp_spawn
    from ddpdoctor.record.reader import load_runs

    spec.validate(values)
    wrapper = spec.wrapper(values)
    stop = spec.stop(values)
    check_writable(json_path)
    check_writable(junit_path)
    check_html_path(html_path)
    if json_path == "-" and junit_path == "-":
        raise DdpdoctorError("--json - and --junit -: only one report can go to standard output")
    if job_store is not None:
        from ddpdoctor.launch.jobstore import store_address

        if store_address(job_store) is None:
            raise DdpdoctorError(f"--job-store must be HOST:PORT with a port from 1 to 65535 (got {job_store!r})")
    tree = check_script(script)
    mode = launch if launch != "auto" else ("spawn" if uses_mp_spawn(tree) else "torchrun")
    if mode == "torchrun" and torchrun.get("nproc_per_node") is None and (n := trainer_devices(tree)):
        torchrun = {**torchrun, "nproc_per_node": str(n)}  # Lightning: as many ranks as Trainer(devices=N)
    targs = torchrun_args(torchrun, mode == "spawn")
    path = rd.create(
        run_dir or rd.default_run_dir(spec.name),
        {
            "command": spec.name,
            "mode": mode,
            "script": script,
            "script_args": list(script_args),
            "torchrun_args": targs,
            "timeout": cfg.timeout,
            "heartbeat_s": Timings().heartbeat,
            "stop": {"steps": stop.steps, "epochs": stop.epochs},
            **spec.settings(values),
        },
    )
    if wrapper:  # nsys: one report per rank in the run directory (%q{RANK} is expanded by nsys)
        os.makedirs(os.path.join(path, schema.NSYS_DIR), mode=0o700, exist_ok=True)
        wrapper = tuple(
            os.path.join(path, schema.NSYS_DIR, "rank%q{RANK}") if a == "NSYS_OUTPUT" else a for a in wrapper
        )
    launch_spec = LaunchSpec(
        script, tuple(script_args), tuple(targs), mode, max_time, stop.steps, stop.epochs, wrapper, job_store
    )
    if not quiet:
        click.echo(
            f"ddpdoctor: {spec.name}: {script} under torchrun ({' '.join(targs)}), mode {mode}; records in {path}",
            err=True,
        )
    outcome = Monitor(
        launch_spec, path, cfg, live=not quiet, echo=not quiet, stdout_free="-" in (json_path, junit_path)
    ).run()
    record = load_runs([path])  # with the other nodes' records from the job store (record/mirror.py)
    report = diagnose(record, cfg, spec.name)
    if outcome.interrupted:
        # never "OK": the run did not finish; findings of what did run are kept (and decide the verdict)
        errors = any(f.severity == "error" for f in report.findings)
        report = dataclasses.replace(
            report,
            verdict=report.verdict if errors else "interrupted",
            exit_code=ExitCode.INTERRUPTED,
            summary=report.summary if errors else "interrupted before the run finished: no verdict on the rest",
            notes=report.notes
            + (
                f"interrupted (Ctrl-C or SIGTERM): every process was ended; the records so far are in {report.run_dir}",
            ),
        )
    report = attach_pictures(report, record, spec.pictures, html_path)
    if outcome.judged_by and not verbose and not quiet:
        # the report is the job's, the same on every node: printed once, by the node that judged the job
        from ddpdoctor.render import RENDERERS

        head = RENDERERS["text"](report).splitlines()[0].rstrip()
        click.echo(
            f"{head}: the job's report is printed by {outcome.judged_by}; this node's records: {report.run_dir} "
            "(--verbose prints the report here too)",
            err="-" in (json_path, junit_path),
        )
        emit(report, json_path, junit_path, quiet_text=True)
        return report
    emit(report, json_path, junit_path, quiet_text=quiet)
    return report
