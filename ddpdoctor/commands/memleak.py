"""``ddpdoctor memleak``: memory per rank per step and why it grows."""

import click

from ddpdoctor.commands import CommandSpec, Opt, Stop

SPEC = CommandSpec(
    name="memleak",
    help="""Memory that grows step after step: which rank, what holds it, why.

    \b
    ddpdoctor memleak --steps 200 train.py --epochs 100
    ddpdoctor memleak --snapshot train.py          # on a GPU: the allocator history too
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
            ("--census-every",),
            dict(
                type=click.IntRange(min=1),
                metavar="K",
                default=None,
                help="Census live tensors every K steps.  [default: by cost]",
            ),
        ),
        Opt(
            ("--snapshot",),
            dict(
                is_flag=True,
                default=False,
                help="GPU: dump the allocator's history for pytorch.org/memory_viz.",
            ),
        ),
    ),
    settings=lambda v: {"memleak": {"census_every": v.get("census_every"), "snapshot": v.get("snapshot")}},
    stop=lambda v: Stop(steps=v.get("steps")),
    pictures=("memory", "html"),
)
