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
        Opt(
            ("--snapshot",),
            dict(
                is_flag=True,
                default=False,
                help="On a GPU: record the CUDA allocator's history (torch.cuda.memory._record_memory_history) "
                "and dump it when a census first sees growth and at the end, per rank, for "
                "https://pytorch.org/memory_viz (costs time on every allocation).",
            ),
        ),
    ),
    settings=lambda v: {"memleak": {"census_every": v.get("census_every"), "snapshot": v.get("snapshot")}},
    stop=lambda v: Stop(steps=v.get("steps")),
    pictures=("memory", "html"),
)
