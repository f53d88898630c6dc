"""``ddpdoctor check``: samplers, seeds, parameter/buffer drift, checkpoint writers, gradient sync."""

import click

from ddpdoctor.commands import CommandSpec, Opt, Stop, Values


def _validate(v: Values) -> None:
    if v.get("steps") and v.get("epochs"):
        from ddpdoctor.errors import DdpdoctorError

        raise DdpdoctorError("give --steps or --epochs, not both")


SPEC = CommandSpec(
    name="check",
    help="""Check samplers, seeds, drift, checkpoint writers and no_sync.

    set_epoch, shard overlap and gaps, sampler seeds, parameter and buffer drift across ranks, several ranks
    writing one checkpoint, gradient accumulation without no_sync().

    \b
    ddpdoctor check --epochs 2 train.py             # check's --epochs: before the script
    ddpdoctor check train.py --epochs 3             # the script's --epochs: after it
    ddpdoctor check --probe healthy                 # the built-in healthy job
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
            ("--epochs",),
            dict(
                type=click.IntRange(min=1),
                metavar="E",
                default=None,
                help="End the run when every rank begins epoch E+1.",
            ),
        ),
        Opt(
            ("--fingerprint-every",),
            dict(
                type=click.IntRange(min=1),
                metavar="K",
                default=None,
                help="Fingerprint every K DDP forwards.  [default: auto]",
            ),
        ),
    ),
    settings=lambda v: {"check": {"every": v.get("fingerprint_every")}},
    stop=lambda v: Stop(steps=v.get("steps"), epochs=v.get("epochs")),
    validate=_validate,
    pictures=("html",),
)
