"""``ddpdoctor tune``: short trials of DDP's knobs and the DataLoader's workers, judged against an A/A control.

Each arm is a ``profile`` run whose probe sets the knob (``rank/probes/profile/knobs.py``): no edit of the
script. The runs and the judgement are ``launch/arms.py`` and ``analysis/profile/trials.py``.
"""

import click

from ddpdoctor.commands import CommandSpec, Opt, Values

KNOB_NAMES = ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph", "comm_hook", "num_workers")


def _names(_ctx: object, _param: object, value: str | None) -> tuple[str, ...] | None:
    if not value:
        return None
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    bad = [n for n in names if n not in KNOB_NAMES]
    if bad:
        raise click.BadParameter(f"{', '.join(bad)}: the knobs are {', '.join(KNOB_NAMES)}")
    return names


def _caps(_ctx: object, _param: object, value: str | None) -> tuple[float, ...] | None:
    if not value:
        return None
    try:
        caps = tuple(float(v) for v in value.split(",") if v.strip())
    except ValueError:
        caps = ()
    if not caps or min(caps) <= 0:
        raise click.BadParameter(f"sizes in MB above 0, e.g. 5,25,100 (got {value!r})")
    return caps


def _run(spec: CommandSpec, params: Values) -> object:
    from ddpdoctor.launch.arms import tune

    return tune(spec, params)


SPEC = CommandSpec(
    name="tune",
    help="""Try DDP's knobs in short runs, judged against an A/A control.

    A survey run, then --reps repetitions of two baseline arms and one arm per knob, in rotated order. A knob
    counts only when every repetition shows its gain beyond the A/A spread; otherwise "within noise".

    \b
    ddpdoctor tune train.py                              # every knob that applies
    ddpdoctor tune --knobs num_workers --reps 3 train.py
    """,
    options=(
        Opt(
            ("--steps",),
            dict(type=click.IntRange(min=5), metavar="N", default=30, show_default=True, help="Steps per arm."),
        ),
        Opt(
            ("--reps",),
            dict(type=click.IntRange(min=2), metavar="R", default=3, show_default=True, help="Repetitions."),
        ),
        Opt(
            ("--knobs",),
            dict(
                metavar="K,K...",
                default=None,
                callback=_names,
                help="Knobs to try (see docs/cli.md).  [default: all that apply]",
            ),
        ),
        Opt(
            ("--bucket-caps",),
            dict(
                metavar="MB,MB...",
                default=None,
                callback=_caps,
                help="bucket_cap_mb sweep.  [default: 5,25,100]",
            ),
        ),
    ),
    settings=lambda v: {"profile": {"nsys": False, "bucket_ranges": False}},
    run=_run,
)
