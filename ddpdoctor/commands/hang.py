"""``ddpdoctor hang``: deadlocks, divergent collectives and crashes. Every command runs these detectors;
this one asks the ranks for nothing more than the ledger and heartbeats every run has."""

from ddpdoctor.commands import CommandSpec

SPEC = CommandSpec(
    name="hang",
    help="""Deadlocks, divergent collectives and crashes, per rank and line.

    Every command runs these detectors too; this one asks the ranks for nothing more.

    \b
    ddpdoctor hang train.py --epochs 3              # like torchrun: after the script, the script's
    ddpdoctor hang --nproc-per-node 4 --timeout 120 train.py --epochs 3
    """,
    pictures=("html",),
)
