"""``ddpdoctor memleak``: memory per rank per step and why it grows."""

import click

from ddpdoctor.commands import CommandSpec, Opt, Stop

SPEC = CommandSpec(
    name="memleak",
    help="""Find memory that grows step after step: on which rank, in which layer, and why.

    \b
    ddpdoctor memleak --script train.py --steps 200
    """,
    options=(
        Opt(
            ("--steps",),
            dict(
                type=click.IntRange(min=1),
                default=None,
                help="End the run once every rank has made this many steps (optimizer steps, else DDP forwards).",
            ),
        ),
        Opt(
            ("--census-every",),
            dict(
                type=click.IntRange(min=1),
                default=None,
                help="Census live tensors and autograd graphs every K steps (default: at "
                "steps 1, 2, 4, ..., 64, then whenever it costs at most 0.25-0.5% of "
                "the time, more often while memory grows, and at the end).",
            ),
        ),
    ),
    settings=lambda v: {"memleak": {"census_every": v.get("census_every")}},
    stop=lambda v: Stop(steps=v.get("steps")),
    pictures=("memory", "html"),
)
