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


SPEC = CommandSpec(
    name="profile",
    help="""Where each rank's step time goes: step breakdown, stragglers, data-loader waits, NVTX for Nsight.

    \b
    ddpdoctor profile --script train.py --steps 200            # own timeline: trace.json (Perfetto)
    ddpdoctor profile --script train.py --nsys                 # plus one nsys report per rank
    """,
    options=(
        Opt(
            ("--steps",),
            dict(
                type=click.IntRange(min=1),
                default=None,
                help="End the run once every rank has made this many DDP steps.",
            ),
        ),
        Opt(
            ("--nsys", "use_nsys"),
            dict(
                is_flag=True,
                help="Run each rank under Nsight Systems (`nsys profile`), "
                "one report per rank, with ddpdoctor's NVTX ranges.",
            ),
        ),
        Opt(
            ("--nsys-args",),
            dict(default="", help="Extra arguments for `nsys profile` (one string, split like a shell)."),
        ),
        Opt(
            ("--bucket-ranges",),
            dict(
                is_flag=True,
                help="Time each DDP gradient bucket's all-reduce as a range "
                "of its own (a Python comm hook: about 0.1-0.2 ms per step "
                "measured here). Default: on with --nsys, else off; "
                "DDP's own timers give the buckets and comm time.",
            ),
        ),
    ),
    settings=lambda v: {
        "profile": {"nsys": bool(v.get("use_nsys")), "bucket_ranges": bool(v.get("bucket_ranges") or v.get("use_nsys"))}
    },
    stop=lambda v: Stop(steps=v.get("steps")),
    wrapper=_nsys,
    pictures=("trace", "html"),
)
