"""``ddpdoctor check``: samplers, seeds, parameter/buffer drift, checkpoint writers, gradient sync."""

import click

from ddpdoctor.commands import CommandSpec, Opt, Stop, Values


def _validate(v: Values) -> None:
    if v.get("steps") and v.get("epochs"):
        from ddpdoctor.errors import DdpdoctorError

        raise DdpdoctorError("give --steps or --epochs, not both")


SPEC = CommandSpec(
    name="check",
    help="""Check set_epoch, shard overlap, seeds, parameter/buffer drift, checkpoint races, no_sync.

    \b
    ddpdoctor check --script train.py --epochs 2
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
            ("--epochs",),
            dict(
                type=click.IntRange(min=1),
                default=None,
                help="End the run once every rank has begun this many epochs and one more "
                "(passes of its busiest DataLoader line).",
            ),
        ),
        Opt(
            ("--fingerprint-every",),
            dict(
                type=click.IntRange(min=1),
                default=None,
                help="Fingerprint parameters and buffers every K DDP forwards "
                "(and at construction). Default: forward 1, every 10 up to "
                "100, then every 100.",
            ),
        ),
    ),
    settings=lambda v: {"check": {"every": v.get("fingerprint_every")}},
    stop=lambda v: Stop(steps=v.get("steps"), epochs=v.get("epochs")),
    validate=_validate,
    pictures=("html",),
)
