"""``ddpdoctor hang``: deadlocks, divergent collectives and crashes. Every command runs these detectors;
this one asks the ranks for nothing more than the ledger and heartbeats every run has."""

from ddpdoctor.commands import CommandSpec

SPEC = CommandSpec(
    name="hang",
    help="""Run a DDP script and report deadlocks, divergent collectives and crashes per rank and line.

    \b
    ddpdoctor hang --script train.py --nproc-per-node 2 -- --epochs 3
    """,
    pictures=("html",),
)
