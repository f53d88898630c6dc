"""``ddpdoctor profile``: step breakdown, stragglers, data-loader waits; NVTX for Nsight Systems."""

import click

from ddpdoctor.commands import CommandSpec, Opt, Stop, Values


def _nsys(v: Values) -> tuple[str, ...]:
    """``nsys profile ...`` for every rank (NSYS_OUTPUT becomes RUN_DIR/nsys/rank%q{RANK})."""
    if not v.get("use_nsys"):
        return ()
    import shlex
    import shutil

    from ddpdoctor.errors import DdpdoctorError, ExitCode

    nsys = shutil.which("nsys")
    if nsys is None:
        raise DdpdoctorError(
            "nsys (Nsight Systems) is not on PATH: install it from "
            "https://developer.nvidia.com/nsight-systems, or run `ddpdoctor profile` without "
            "--nsys for ddpdoctor's own timeline",
            ExitCode.NOT_RUN,
        )
    try:
        extra = shlex.split(v.get("nsys_args") or "")
    except ValueError as e:
        raise DdpdoctorError(f"--nsys-args: {e}") from None
    return (nsys, "profile", "-t", "cuda,nvtx,osrt", "--force-overwrite", "true", *extra, "-o", "NSYS_OUTPUT")


def _run(spec: CommandSpec, params: Values) -> object:
    """One run, or with --scaling one run per world size (launch/arms.py)."""
    if params.get("scaling"):
        from ddpdoctor.launch.arms import scaling_run

        return scaling_run(spec, params)
    from ddpdoctor.launch.command import run_params

    params.pop("scaling", None)
    return run_params(spec, params)


SPEC = CommandSpec(
    name="profile",
    help="""Where each rank's step time goes: phases, stragglers, data waits.

    NVTX ranges for Nsight Systems, and trace.json for ui.perfetto.dev.

    \b
    ddpdoctor profile --steps 200 train.py            # own timeline: trace.json (Perfetto)
    ddpdoctor profile --nsys train.py                 # plus one nsys report per rank
    ddpdoctor profile --scaling 1,2,4 train.py        # throughput and efficiency per world size
    """,
    options=(
        Opt(
            ("--steps",),
            dict(
                type=click.IntRange(min=1),
                metavar="N",
                default=None,
                help="End the run after N training steps on every rank.",
            ),
        ),
        Opt(
            ("--nsys", "use_nsys"),
            dict(
                is_flag=True,
                help="Run each rank under `nsys profile`: one report per rank.",
            ),
        ),
        Opt(
            ("--nsys-args",),
            dict(default="", metavar="ARGS", help="Extra `nsys profile` arguments, as one string."),
        ),
        Opt(
            ("--bucket-ranges",),
            dict(
                is_flag=True,
                help="Time each DDP bucket's all-reduce.  [default: with --nsys]",
            ),
        ),
        Opt(
            ("--scaling",),
            dict(
                metavar="N,N...",
                default=None,
                help="Run at each world size (1,2,4): efficiency vs the smallest.",
            ),
        ),
    ),
    settings=lambda v: {
        "profile": {"nsys": bool(v.get("use_nsys")), "bucket_ranges": bool(v.get("bucket_ranges") or v.get("use_nsys"))}
    },
    stop=lambda v: Stop(steps=v.get("steps")),
    wrapper=_nsys,
    pictures=("trace", "html"),
    run=_run,
)
