"""Several runs of one script as the arms of a measurement: ``ddpdoctor tune`` (DDP's knobs against an A/A
control) and ``ddpdoctor profile --scaling`` (one arm per world size). Each arm is a whole ``profile`` run
(``run_params``: its own run directory under the command's, its own report); the figures come from its
records (``analysis.profile.trials.figures_of``), the judgement is pure (``trials.judge``, ``scaling``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Iterator
from typing import Any

import click

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Report
from ddpdoctor.commands import CommandSpec
from ddpdoctor.errors import DdpdoctorError, ExitCode

BASELINES = ("baseline A", "baseline A'")
SWEEP = (5.0, 25.0, 100.0)  # bucket_cap_mb arms, less the script's own value (DDP's default: 25)
WORKERS = (2, 4)  # num_workers arms, those above the script's own
DATA_SHARE = 0.10  # the survey's data wait share of the step above which num_workers arms run
KNOBS = ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph", "comm_hook", "num_workers")


@dataclasses.dataclass(frozen=True)
class Arm:
    """One arm: its label, the knobs the rank probe applies, and the script's one-line change."""

    label: str
    knobs: dict[str, Any]
    change: str = ""
    note: str = ""  # e.g. "changes results"


@dataclasses.dataclass
class ArmRun:
    report: Report
    figures: Any  # trials.RunFigures | None


def _arm_spec(knobs: dict[str, Any] | None, pictures: tuple[str, ...]) -> CommandSpec:
    """profile's spec with the arm's knobs in its probe settings (None: a ``--scaling`` run, which counts
    the samples of each step instead)."""
    from ddpdoctor.commands.profile import SPEC

    base = SPEC.settings

    def settings(v: dict[str, Any]) -> dict[str, Any]:
        out = base(v)
        extra = {"knobs": dict(knobs)} if knobs is not None else {"count_samples": True}
        out["profile"] = {**out["profile"], **extra}
        return out

    return dataclasses.replace(SPEC, settings=settings, pictures=pictures, run=None)


@contextlib.contextmanager
def _env(key: str, value: str | None) -> Iterator[None]:
    """``key=value`` in the environment torchrun inherits, for one arm."""
    old = os.environ.get(key)
    if value is not None:
        os.environ[key] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old


def run_arm(
    params: dict[str, Any],
    run_dir: str,
    knobs: dict[str, Any] | None,
    pictures: tuple[str, ...] = (),
    nproc: int | None = None,
) -> ArmRun:
    """One arm: a ``profile`` run into ``run_dir`` (quiet), its report and figures."""
    from ddpdoctor.analysis.profile.trials import figures_of
    from ddpdoctor.launch.command import run_params
    from ddpdoctor.record.reader import load_run

    p = dict(params, run_dir=run_dir, json_path=None, junit_path=None, html_path=None)
    if nproc is not None:
        p["nproc_per_node"] = str(nproc)
    report = run_params(_arm_spec(knobs, pictures), p, quiet=True)
    if report.exit_code == ExitCode.INTERRUPTED:
        raise click.exceptions.Abort()
    figures = figures_of(load_run(run_dir)) if report.exit_code in (0, 1) else None
    return ArmRun(report, figures)


def _parent(params: dict[str, Any], name: str) -> str:
    from ddpdoctor.launch import rundir as rd

    path = os.path.abspath(params.get("run_dir") or rd.default_run_dir(name))
    if os.path.isdir(path) and os.listdir(path):
        raise DdpdoctorError(f"run directory {path} exists and is not empty; choose a new --run-dir")
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def _refuse(params: dict[str, Any], command: str) -> None:
    for key, opt in (("junit_path", "--junit"), ("html_path", "--html")):
        if params.get(key):
            raise DdpdoctorError(
                f"{command}: {opt} is not written for a run of several arms: its table goes to the terminal and "
                "--json; every arm's run directory holds its own report.html"
            )


def _failed(arm: ArmRun) -> bool:
    """The arm has no figures (no steady step) or an error finding (a crash, a hang)."""
    return arm.figures is None or any(f.severity == "error" for f in arm.report.findings)


def _stop_on_failure(arm: ArmRun, what: str) -> Report | None:
    """The arm's report, printed, when the unchanged script failed there (every other arm would too); a run
    that ended well but made no steady optimizer step gives nothing to measure: exit code 4, never 0."""
    if not _failed(arm):
        return None
    from ddpdoctor.render import RENDERERS

    click.echo(f"ddpdoctor: {what} failed or made no steady optimizer step; its report:", err=True)
    click.echo(RENDERERS["text"](arm.report), nl=False)
    if arm.report.exit_code == 0:
        return dataclasses.replace(arm.report, exit_code=ExitCode.NOT_RUN)
    return arm.report


def _script_text(params: dict[str, Any], command: str) -> tuple[str, str]:
    """The script's name and source text (for ``register_comm_hook``). ``ddpdoctor CMD -- COMMAND...`` (the
    user's own launcher line): the command's first ``.py`` word, if any."""
    from ddpdoctor.launch.command import split_script
    from ddpdoctor.launch.script import module_path

    p = dict(params)
    if p.get("launch_command"):
        words = [str(w) for w in p.get("script_args") or ()]
        name, path = " ".join(words), next((w for w in words if w.endswith(".py")), "")
    else:
        name, _args = split_script(command, p)  # no script: one line, exit 2
        path = module_path(name) if p.get("module") else name
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return name, f.read()
    except OSError:
        return name, ""  # run_params says why in one line


def plan(
    facts: dict[str, Any],
    data_share: float,
    world: int,
    backend: str,
    own_hook: bool,
    knobs: tuple[str, ...],
    caps: tuple[float, ...],
) -> tuple[list[Arm], list[str]]:
    """The knob arms for what the survey run showed, and a line for each knob not tried and why."""
    arms: list[Arm] = []
    skipped: list[str] = []
    ddp = (facts.get("ddp") or {}).get("script") or {}
    loader = facts.get("loader") or {}
    if world < 2 and any(k != "num_workers" for k in knobs):
        skipped.append("DDP's knobs: one rank has no gradient all-reduce to tune")
        knobs = tuple(k for k in knobs if k == "num_workers")
    if not facts.get("ddp") and any(k != "num_workers" for k in knobs):
        skipped.append("DDP's knobs: the survey run built no DistributedDataParallel")
        knobs = tuple(k for k in knobs if k == "num_workers")
    if "bucket_cap_mb" in knobs:
        own = ddp.get("bucket_cap_mb")
        own = 25.0 if own is None else float(own)
        for cap in caps:
            if abs(cap - own) > 1e-9:
                arms.append(
                    Arm(f"bucket_cap_mb={cap:g}", {"bucket_cap_mb": cap}, f"DDP(model, ..., bucket_cap_mb={cap:g})")
                )
    if "gradient_as_bucket_view" in knobs:
        if ddp.get("gradient_as_bucket_view"):
            skipped.append("gradient_as_bucket_view: the script sets it already")
        else:
            arms.append(
                Arm(
                    "gradient_as_bucket_view",
                    {"gradient_as_bucket_view": True},
                    "DDP(model, ..., gradient_as_bucket_view=True)",
                )
            )
    if "static_graph" in knobs:
        if ddp.get("static_graph"):
            skipped.append("static_graph: the script sets it already")
        elif ddp.get("find_unused_parameters"):
            skipped.append(
                "static_graph: not applicable: the script sets find_unused_parameters=True, so its graph may change "
                "between iterations, and static_graph=True requires the same graph every iteration"
            )
        else:
            arms.append(Arm("static_graph", {"static_graph": True}, "DDP(model, ..., static_graph=True)"))
    if "comm_hook" in knobs:
        if own_hook:
            skipped.append("compression hook: the script registers a comm hook of its own")
        else:
            hooks = ["fp16", "bf16"] if backend == "nccl" else ["fp16"]
            if backend != "nccl":
                skipped.append(
                    f"bf16 compression hook: not applicable on {backend or 'this backend'} (it needs NCCL 2.10+)"
                )
            for h in hooks:
                arms.append(
                    Arm(
                        f"{h} compression hook",
                        {"comm_hook": h},
                        "model.register_comm_hook(None, torch.distributed.algorithms.ddp_comm_hooks.default_hooks."
                        f"{h}_compress_hook)",
                        note=f"changes results: gradients are all-reduced in {h}",
                    )
                )
    if "num_workers" in knobs:
        if not loader:
            skipped.append("num_workers: the script makes no DataLoader")
        elif loader.get("iterable") and not loader.get("splits"):
            skipped.append(
                "num_workers: not applicable: the DataLoader's IterableDataset does not split itself across workers "
                "(its __iter__ never calls get_worker_info): every worker would yield the whole stream"
            )
        elif data_share < DATA_SHARE:
            skipped.append(
                f"num_workers: the job waits on data {100 * data_share:.0f} % of a step "
                f"(below {100 * DATA_SHARE:.0f} %)"
            )
        else:
            own_w = int(loader.get("num_workers") or 0)
            for w in WORKERS:
                if w > own_w:
                    arms.append(Arm(f"num_workers={w}", {"num_workers": w}, f"DataLoader(..., num_workers={w})"))
    return arms, skipped


def _ms(xs: list[float]) -> str:
    from statistics import median

    return f"{median(xs):7.1f} ms [{min(xs):.1f}-{max(xs):.1f}]"


def tune(spec: CommandSpec, params: dict[str, Any]) -> Report:
    """``ddpdoctor tune``: a survey run, then ``--reps`` repetitions of the A/A pair and every knob arm in
    rotated order; prints each arm's steady step, the verdict and the script's one-line change."""
    from ddpdoctor.analysis.profile import trials
    from ddpdoctor.analysis.registry import conclude

    _refuse(params, "tune")
    reps = int(params.pop("reps", None) or 3)
    knobs = tuple(params.pop("knobs", None) or KNOBS)
    caps = tuple(params.pop("bucket_caps", None) or SWEEP)
    steps = int(params.get("steps") or 30)
    params = dict(params, steps=steps)
    json_path = params.get("json_path")
    name, source = _script_text(params, "tune")
    parent = _parent(params, "tune")
    click.echo(f"ddpdoctor: tune: {name}: a survey run, then {reps} repetitions; records in {parent}", err=True)
    survey = run_arm(params, os.path.join(parent, "survey"), {})
    if stopped := _stop_on_failure(survey, "the survey run (the script unchanged)"):
        return stopped
    f0 = survey.figures
    backend = _backend(survey)
    share = f0.parts.get("data", 0.0) / f0.step_ms if f0.step_ms else 0.0
    arms, skipped = plan(f0.facts, share, f0.world_size, backend, "register_comm_hook" in source, knobs, caps)
    labels = [*BASELINES, *(a.label for a in arms)]
    by_label = {a.label: a for a in arms}
    times: dict[str, list[float | None]] = {lab: [] for lab in labels}
    spreads: dict[str, list[float]] = {lab: [] for lab in labels}
    failures: dict[str, str] = {}
    for rep in range(reps):
        order = trials.rotated(labels, rep)
        click.echo(f"ddpdoctor: tune: repetition {rep + 1}/{reps}: {', '.join(order)}", err=True)
        for i, lab in enumerate(order):
            d = os.path.join(parent, f"rep{rep}-{i:02d}-{_slug(lab)}")
            arm = run_arm(params, d, by_label[lab].knobs if lab in by_label else {})
            if lab in BASELINES and (stopped := _stop_on_failure(arm, f"{lab} of repetition {rep + 1}")):
                return stopped
            fig = arm.figures
            if fig is None or _failed(arm):
                times[lab].append(None)
                failures.setdefault(lab, arm.report.summary or arm.report.verdict)
            else:
                times[lab].append(fig.step_ms)
                spreads[lab].append(fig.spread_ms)
                hook = fig.facts.get("hook") or {}
                if hook and not hook.get("registered"):
                    failures.setdefault(lab, f"the hook was not registered: {hook.get('why')}")
    a = [float(x) for x in times[BASELINES[0]] if x is not None]
    b = [float(x) for x in times[BASELINES[1]] if x is not None]
    judged = {
        lab: (
            trials.Judgement(trials.FAILED, (), trials.aa_spread(a, b))
            if lab in failures
            else trials.judge(a, b, times[lab])
        )
        for lab in labels[2:]
    }
    winner = trials.best(judged)
    lines = _tune_lines(
        name, f0, reps, steps, labels, times, spreads, judged, by_label, failures, skipped, winner, a, b
    )
    click.echo("\n".join(lines))
    if json_path:
        from ddpdoctor.cli.findings import write_json

        write_json(
            {
                "schema": "ddpdoctor.tune",
                "version": 1,
                "command": "tune",
                "script": name,
                "run_dir": parent,
                "reps": reps,
                "steps": steps,
                "aa_spread": trials.aa_spread(a, b),
                "arms": {
                    lab: {
                        "step_ms": times[lab],
                        "verdict": judged[lab].verdict if lab in judged else "baseline",
                        "gains": list(judged[lab].gains) if lab in judged else [],
                        "change": by_label[lab].change if lab in by_label else "",
                        "note": by_label[lab].note if lab in by_label else "",
                        "failure": failures.get(lab, ""),
                    }
                    for lab in labels
                },
                "best": winner,
                "not_tried": skipped,
            },
            json_path,
        )
    return conclude([], Config(), command="tune", run_dir=parent)


def _backend(arm: ArmRun) -> str:
    """The backend the arm's ranks initialised (their init record)."""
    from ddpdoctor.record import schema
    from ddpdoctor.record.reader import load_run

    for r in load_run(arm.report.run_dir).ranks.values():
        if (e := r.event(schema.K_INIT)) and e.get("backend"):
            return str(e["backend"])
    return ""


def _slug(label: str) -> str:
    """An arm's folder name: ``baseline-A``, ``baseline-A2`` (A'), ``num_workers=2``."""
    return "".join(c if c.isalnum() or c in "=._" else "2" if c == "'" else "-" for c in label).strip("-")


def _tune_lines(
    name: str,
    f0: Any,
    reps: int,
    steps: int,
    labels: list[str],
    times: dict[str, list[float | None]],
    spreads: dict[str, list[float]],
    judged: dict[str, Any],
    by_label: dict[str, Arm],
    failures: dict[str, str],
    skipped: list[str],
    winner: str | None,
    a: list[float],
    b: list[float],
) -> list[str]:
    """The tune report's lines."""
    from statistics import median

    from ddpdoctor.analysis.profile import trials

    spread = trials.aa_spread(a, b)
    out = [
        f"ddpdoctor tune: {name}, {f0.world_size} rank{'s' if f0.world_size != 1 else ''}, {reps} repetitions of "
        f"{len(labels)} arms in rotated order, {steps} steps each (the first fifth skipped as warm-up)",
        "  steady step: median of the repetitions' typical steps [min-max]; +/-: median spread within a run "
        "(interquartile); gain: vs the mean of the repetition's two baseline arms",
    ]
    for lab in labels:
        xs = [float(x) for x in times[lab] if x is not None]
        within = f" +/-{median(spreads[lab]):.1f}" if spreads[lab] else ""
        head = f"  {lab:<28}{_ms(xs) if xs else '      -':<26}{within:<9}"
        if lab in BASELINES:
            out.append(head + "baseline")
            continue
        j = judged[lab]
        if j.verdict == trials.FAILED:
            out.append(head + f"failed: {failures.get(lab, 'no steady step')}")
            continue
        gains = ", ".join(f"{100 * g:+.0f} %" for g in j.gains)
        note = f"  ({by_label[lab].note})" if by_label[lab].note else ""
        out.append(head + f"{j.verdict} (gains {gains}){note}")
    out.append(
        f"  A/A spread: {100 * spread:.1f} % (the largest difference between the two baseline arms of a repetition)"
    )
    out += [f"  not tried: {s}" for s in skipped]
    if winner:
        j = judged[winner]
        out.append(
            f"  verdict: {winner} is faster in every repetition, beyond the A/A spread: step time "
            f"{-100 * j.median_gain:+.0f} % (median of the repetitions)"
        )
        out.append(
            f"  change: {by_label[winner].change}" + (f"  # {by_label[winner].note}" if by_label[winner].note else "")
        )
        others = [lab for lab, jj in judged.items() if jj.verdict == trials.FASTER and lab != winner]
        if others:
            out.append(f"  also faster beyond noise: {', '.join(others)}")
    else:
        out.append(
            f"  verdict: no change beyond noise: no knob beat the A/A spread ({100 * spread:.1f} %) in every "
            "repetition; keep the script's settings"
        )
    return out


def parse_sizes(text: str) -> list[int]:
    """``--scaling 1,2,4``: distinct world sizes of at least 1, ascending; a bad list is one line (exit 2)."""
    try:
        sizes = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        sizes = []
    if len(sizes) < 2 or sizes[0] < 1:
        raise DdpdoctorError(f"--scaling takes two or more world sizes of at least 1, e.g. 1,2,4 (got {text!r})")
    return sizes


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def scaling_run(spec: CommandSpec, params: dict[str, Any]) -> Report:
    """``ddpdoctor profile --scaling 1,2,4``: the script for ``--steps`` steps at each world size, with the
    same OMP_NUM_THREADS in every arm; throughput, efficiency against the smallest run and the lost part
    split by the records; report.html of the largest run draws the curve."""
    import dataclasses as dc

    from ddpdoctor.analysis.profile.scaling import machine_bound, scaling
    from ddpdoctor.analysis.profile.trials import RunFigures
    from ddpdoctor.launch.command import attach_pictures, emit, gpu_count
    from ddpdoctor.record.mirror import load_runs

    _refuse(dict(params, html_path=None), "profile --scaling")
    sizes = parse_sizes(str(params.pop("scaling")))
    if params.get("nproc_per_node") or params.get("nnodes") or params.get("launch_command"):
        raise DdpdoctorError(
            "--scaling sets the number of ranks of each run: leave out --nproc-per-node and --nnodes, and give "
            "the script itself rather than a launcher command"
        )
    steps = int(params.get("steps") or 30)
    params = dict(params, steps=steps)
    html_path, json_path = params.get("html_path"), params.get("json_path")
    threads = os.environ.get("OMP_NUM_THREADS") or "1"
    name, _source = _script_text(params, "profile")
    parent = _parent(params, "profile-scaling")
    click.echo(
        f"ddpdoctor: profile --scaling {','.join(map(str, sizes))}: {name}, {steps} steps per world size, "
        f"OMP_NUM_THREADS={threads} set in every run (torchrun sets it to 1 only above one rank); records in {parent}",
        err=True,
    )
    runs: dict[int, ArmRun] = {}
    for n in sizes:
        with _env("OMP_NUM_THREADS", threads):
            arm = run_arm(params, os.path.join(parent, f"ranks-{n}"), None, ("trace",), nproc=n)
        if stopped := _stop_on_failure(arm, f"the run on {n} rank{'s' if n != 1 else ''}"):
            return stopped
        runs[n] = arm
    figs: list[RunFigures] = [runs[n].figures for n in sizes]
    points, counted = scaling(figs)
    gpus = gpu_count()
    bound = machine_bound(sizes, int(threads) if threads.isdigit() else 1, _cores(), gpus)
    lines = scaling_lines(name, points, counted, figs, threads, bound)
    top = runs[sizes[-1]]
    # the largest run's report.html draws the curve: the figures go into its manifest (what it was part of)
    _add_to_manifest(top.report.run_dir, {"scaling": [dc.asdict(p) | {"efficiency": p.efficiency} for p in points]})
    report = dc.replace(top.report, notes=(*top.report.notes, *lines[1:]))
    report = attach_pictures(report, load_runs([top.report.run_dir]), ("html",), html_path)
    click.echo("\n  ".join(lines))
    click.echo(f"  report with the scaling curve: {os.path.join(top.report.run_dir, 'report.html')}")
    if json_path:
        emit(report, json_path, None, quiet_text=True)
    return dc.replace(report, exit_code=max(r.report.exit_code for r in runs.values()))


def _add_to_manifest(run_dir: str, fields: dict[str, Any]) -> None:
    from ddpdoctor.record import schema

    path = os.path.join(run_dir, schema.MANIFEST)
    with open(path, encoding="utf-8") as f:
        manifest = json.load(f)
    manifest.update(fields)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
    os.replace(tmp, path)


def scaling_lines(
    name: str, points: list[Any], counted: bool, figs: list[Any], threads: str, bound: str | None
) -> list[str]:
    """The scaling report's lines."""
    per_rank = figs[0].per_rank_samples if figs else None
    out = [
        f"ddpdoctor profile --scaling: {name}; OMP_NUM_THREADS={threads} in every run (set by ddpdoctor)",
        (
            f"samples counted: the leading size of each DDP.forward's first tensor, summed over the forwards of an "
            f"optimizer step (micro-batches included) and over the ranks ({per_rank} per rank per step at "
            f"{figs[0].world_size} rank{'s' if figs[0].world_size != 1 else ''})"
            if counted
            else "samples: not counted (no DDP.forward with a tensor argument): throughput is optimizer steps x ranks per second"
        ),
    ]
    unit = "samples/s" if counted else "rank-steps/s"
    for p, f in zip(points, figs):
        head = (
            f"{p.world_size} rank{'s' if p.world_size != 1 else ''}: step {p.step_ms:.1f} ms (+/-{p.spread_ms:.1f}), "
            f"{p.samples_per_step:g} {'samples' if counted else 'rank-steps'}/step, {p.throughput:.0f} {unit}"
        )
        if f.exposed_ms is not None and p.world_size > 1:
            head += (
                f"; DDP's timers: gradient all-reduce {f.comm_ms:.1f} ms, {f.exposed_ms:.1f} ms of it after the "
                "backward compute ended"
            )
        out.append(head)
    for p in points[1:]:
        parts = ", ".join(f"{k} {v:.1f}" for k, v in p.lost.items())
        out.append(f"{p.line()}; lost {p.lost_ms:.1f} ms of its {p.step_ms:.1f} ms step: {parts}")
    if any(p.efficiency > 1.05 for p in points[1:]):
        out.append(
            f"note: above linear: the run on {points[0].world_size} rank{'s' if points[0].world_size != 1 else ''} "
            "took longer per sample than a larger one (a busy machine, or caches): each world size ran once, so "
            "these figures carry that run's noise; rerun on a quiet machine"
        )
    if bound:
        out.append(f"note: {bound}")
    return out
