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
from ddpdoctor.launch.launchers import MULTI_KEYS
from ddpdoctor.launch.timings import Timings
from ddpdoctor.launch.torchrun_options import BY_KEY, OWN_PET, PASSED, TORCHRUN_OPTIONS, std_map
from ddpdoctor.record import schema


def _default_nproc() -> str:
    """The GPUs of the SLURM step on this node (SLURM_GPUS_ON_NODE), else CUDA_VISIBLE_DEVICES', else the
    driver's, else 2."""
    from ddpdoctor.launch.launchers import default_nproc

    if (n := default_nproc(os.environ)) is not None:
        return n
    return str(gpus) if (gpus := gpu_count()) > 0 else "2"


def gpu_count() -> int:
    """The GPUs the driver sees through NVML (0 without NVML or a driver)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return 0


@dataclasses.dataclass(frozen=True)
class LaunchLine:
    """What the torchrun options of one command line come to: torchrun's arguments, and the options the
    tool takes over (``-m``, the logging options), with the lines that say what it did with them."""

    torchrun_args: list[str]
    module: bool = False
    log_dir: str | None = None  # --log-dir: torchrun's worker logs are copied there at the end
    console_off: dict[int, int] | int = 0  # --redirects: the streams kept off the console, by local rank
    notes: tuple[str, ...] = ()
    own_env: dict[str, str] = dataclasses.field(default_factory=dict)  # PET_* of the options taken over


def _from_pet(opts: dict[str, Any], env: Any) -> dict[str, Any]:
    """torchrun reads an option from its ``PET_*`` variable where the command line gives none: so does the
    tool, for every option (the multi-node ones are launchers.from_environment's, which says it used them)."""
    out = dict(opts)
    for o in TORCHRUN_OPTIONS:
        v = env.get(o.pet) if o.pet else None
        if not v or out.get(o.key) not in (None, False) or o.key in MULTI_KEYS:
            continue
        if o.flag:
            try:
                out[o.key] = bool(int(v))  # torchrun's own reading of a flag's variable
            except ValueError:
                raise DdpdoctorError(f"{o.pet}={v!r}: torchrun reads it as 0 or 1") from None
        else:
            out[o.key] = v
    return out


def launch_line(opts: dict[str, Any], spawn: bool, env: Any = None) -> LaunchLine:
    """torchrun's arguments from the torchrun options (and their ``PET_*`` variables), with the options the
    tool takes over apart. An option it cannot honour: one line, exit 2."""
    env = os.environ if env is None else env
    opts = _from_pet(opts, env)
    notes = []
    if opts.get("run_path"):
        notes.append(
            "--run-path: each rank runs the script in a process of its own under ddpdoctor; the script sees the "
            "same argv, __name__ and environment"
        )
    try:
        console_off = std_map(opts.get("redirects"))
        std_map(opts.get("tee"))
    except ValueError:
        bad = "--redirects" if opts.get("redirects") else "--tee"
        raise DdpdoctorError(f"{bad} must be 0-3, or LOCAL_RANK:STD,... as torchrun takes it") from None
    if int(opts.get("max_restarts") or 0) > 0 and env.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE") != "1":
        # measured with bare torchrun --standalone --max-restarts 1 on gloo, torch 2.13: 1 restart of 4 came up;
        # attempt 1 read attempt 0's gloo addresses from the store the rendezvous shares with the workers
        notes.append(
            "--max-restarts: torch's rendezvous store, shared with the workers, keeps the last attempt's addresses "
            "and a restarted gloo group may connect to them (bare torchrun too); "
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 gives each attempt a store of its own"
        )
    if opts.get("tee") not in (None, "0"):
        notes.append("--tee: every rank's streams are teed into the run directory already (logs/)")
    if opts.get("log_dir"):
        check_writable(os.path.join(str(opts["log_dir"]), "x"), folder_may_be_made=True)
    args = torchrun_args({k: opts.get(k) for k in PASSED}, spawn)
    return LaunchLine(
        args,
        module=bool(opts.get("module")),
        log_dir=opts.get("log_dir"),
        console_off=console_off,
        notes=tuple(notes),
        own_env={k: env[k] for k in OWN_PET if k in env},
    )


def torchrun_args(opts: dict[str, Any], spawn: bool) -> list[str]:
    """torchrun's arguments from the options passed to it as they are (torchrun_options.PASSED)."""
    nproc = opts.get("nproc_per_node") or os.environ.get("PET_NPROC_PER_NODE")
    if nproc is not None and not (nproc.isdigit() and int(nproc) >= 1) and nproc not in ("auto", "cpu", "gpu"):
        raise DdpdoctorError(f"--nproc-per-node must be a number of at least 1, or auto/cpu/gpu (got {nproc})")
    args = ["--nproc-per-node", "1" if spawn else (nproc or _default_nproc())]
    if not spawn:  # srun, a PyTorchJob: the multi-node options from the launcher's environment
        from ddpdoctor.launch.launchers import from_environment, step_port_conflict

        opts = from_environment(opts, os.environ)[0]
        if conflict := step_port_conflict(opts, os.environ):
            raise DdpdoctorError(conflict)
    multi = any(opts.get(k) is not None for k in MULTI_KEYS)
    for key in PASSED:
        v = opts.get(key)
        if key == "nproc_per_node" or v is None or v is False:
            continue
        o = BY_KEY[key]
        args += [o.flag_name] if o.flag else [o.flag_name, str(v)]
    if not multi and "--standalone" not in args:
        args.append("--standalone")  # a free port on this host: parallel runs do not collide
    return args


def split_script(name: str, params: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """The script and its arguments from a run command's parsed ``params`` (popped from it): ``--probe NAME``
    is that built-in probe with every positional as its argument; else the first positional is the script.
    Neither: a usage error (no stand-in script runs unasked). With ``-m`` the script is a module's name.
    ``name``: the command's, for that error."""

    positional = list(params.pop("script_args", None) or ())
    probe = params.pop("probe", None)
    params.pop("script", None)
    if probe and params.get("module"):
        raise DdpdoctorError("--probe runs a built-in script: it takes no -m")
    if probe:
        script, rest = probe_path(f"{probe}.py"), positional
    elif positional:
        script, rest = positional[0], positional[1:]
    else:
        raise DdpdoctorError(
            f"no script: ddpdoctor {name} [OPTIONS] SCRIPT [ARGS]... (like torchrun), "
            "or -m MODULE [ARGS]..., or --probe healthy for the built-in healthy job"
        )
    if rest[:1] == ["--"]:
        rest = rest[1:]  # torchrun drops one `--` right after the script; the script sees the same argv here
    return script, tuple(rest)


def probe_path(name: str) -> str:
    from importlib.resources import files

    return str(files("ddpdoctor.probes") / name)


def check_writable(path: str | None, folder_may_be_made: bool = False) -> None:
    """A file can be written at ``path`` (its folder exists and is writable; with ``folder_may_be_made``,
    the nearest existing folder above it is writable)."""
    if path and path != "-":
        d = os.path.dirname(os.path.abspath(path))
        while folder_may_be_made and not os.path.exists(d) and os.path.dirname(d) != d:
            d = os.path.dirname(d)
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


TORCHRUN_KEYS = set(BY_KEY)
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
    p = dict(params)
    if p.pop("launch_command", False):  # ddpdoctor CMD [OPTIONS] -- COMMAND...: the whole command is the user's
        command = tuple(p.pop("script_args", None) or ())
        p.pop("probe", None)
        p.pop("script", None)
        script, script_args, launcher = command[0], command[1:], True
    else:
        script, script_args = split_script(spec.name, p)
        launcher = False
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
        launcher=launcher,
    )


def check_launcher(script: str, torchrun: dict[str, Any], launch: str, wrapper: tuple[str, ...], command: bool) -> None:
    """The launcher form (``command``: ``-- COMMAND...``) and torchrun's ``--no-python`` run a program that
    ddpdoctor does not start under Python itself: refuse what they cannot honour, in one line."""
    if command and (given := sorted(BY_KEY[k].flag_name for k, v in torchrun.items() if v not in (None, False))):
        raise DdpdoctorError(
            f"{', '.join(given)}: with your own launch command after --, torchrun's options are that command's; "
            "put them in it"
        )
    form = "your own launch command" if command else "--no-python"
    if not command and torchrun.get("module"):
        raise DdpdoctorError("--no-python and -m: torchrun runs a program with --no-python, not a module")
    if launch != "auto":
        raise DdpdoctorError(f"--launch {launch}: with {form} the launcher is yours; leave --launch out")
    if wrapper:
        raise DdpdoctorError(f"{wrapper[0]}: with {form} ddpdoctor does not start the ranks to run them under it")
    import shutil

    if shutil.which(script) is None:
        raise DdpdoctorError(f"{script}: no such program (not on PATH, or not executable)", ExitCode.NOT_RUN)


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
    launcher: bool = False,
) -> Report:
    """Run ``script`` under torchrun for ``spec`` with its option ``values``; diagnose, render, return.
    ``job_store``: --job-store HOST:PORT (multi-node), before $DDPDOCTOR_JOB_STORE. A node of a job that
    another node judged prints one line pointing at the judge's report, unless ``verbose``. ``launcher``:
    ``script`` and ``script_args`` are the user's own launch command (rank/enter.py)."""
    from ddpdoctor.analysis import diagnose
    from ddpdoctor.launch import rundir as rd
    from ddpdoctor.launch.monitor import LaunchSpec, Monitor
    from ddpdoctor.launch.script import check_script, module_path, trainer_devices, uses_mp_spawn
    from ddpdoctor.record.mirror import load_runs

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
    module = bool(torchrun.get("module"))
    no_python = bool(_from_pet(torchrun, os.environ).get("no_python"))
    if launcher or no_python:
        # a program ddpdoctor does not run under Python: the probes enter its Python ranks (rank/enter.py)
        check_launcher(script, torchrun, launch, wrapper, launcher)
        mode, script_path = "launcher", script
        line = LaunchLine([]) if launcher else launch_line(torchrun, False)
    else:
        script_path = module_path(script) if module else script
        tree = check_script(script_path)
        mode = launch if launch != "auto" else ("spawn" if uses_mp_spawn(tree) else "torchrun")
        if mode == "torchrun" and torchrun.get("nproc_per_node") is None and (n := trainer_devices(tree)):
            torchrun = {**torchrun, "nproc_per_node": str(n)}  # Lightning: as many ranks as Trainer(devices=N)
        line = launch_line(torchrun, mode == "spawn")
    targs = line.torchrun_args
    path = rd.create(
        run_dir or rd.default_run_dir(spec.name),
        {
            "command": spec.name,
            "mode": mode,
            "script": script,
            **({"module": True, "script_path": os.path.abspath(script_path)} if module else {}),
            "script_args": list(script_args),
            "torchrun_args": targs,
            **({"own_env": line.own_env} if line.own_env else {}),
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
        script,
        tuple(script_args),
        tuple(targs),
        mode,
        max_time,
        stop.steps,
        stop.epochs,
        wrapper,
        job_store,
        log_dir=line.log_dir,
        console_off=line.console_off,
        hidden_env=tuple(line.own_env),
    )
    if not quiet:
        import shlex

        what = f"-m {script}" if module else script
        how = f"under torchrun ({' '.join(targs)}), mode {mode}"
        if mode == "launcher":
            what = shlex.join([script, *script_args]) if launcher else what
            how = (
                "(your launch command" if launcher else f"under torchrun ({' '.join(targs)}) --no-python (your program"
            ) + ": the probes enter its Python ranks through the environment)"
        click.echo(f"ddpdoctor: {spec.name}: {what} {how}; records in {path}", err=True)
        from ddpdoctor.launch.launchers import tasks_line

        for note in (*line.notes, tasks_line(targs[1], os.environ) if targs else None):
            if note:
                click.echo(f"ddpdoctor: note: {note}", err=True)
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
    if not quiet:  # under SLURM, the node's other tasks write this report where their own --json asks
        from ddpdoctor.launch.leader import publish_report
        from ddpdoctor.render import RENDERERS

        publish_report(lambda: RENDERERS["json"](report), os.environ)
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
