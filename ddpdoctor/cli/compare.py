"""``ddpdoctor compare``: gate a change on two JSON reports (step time, memory growth)."""

from __future__ import annotations

import sys

import click


@click.command(short_help="Compare two profile or memleak JSON reports: regressions.")
@click.argument("base", type=click.Path(dir_okay=False))
@click.argument("new", type=click.Path(dir_okay=False))
@click.option(
    "--max-step-time-regression",
    "max_step",
    type=click.FloatRange(min=0),
    default=None,
    metavar="PCT",
    help="Step time up > PCT %: a regression.  [default: 10]",
)
@click.option(
    "--max-memory-slope-regression",
    "max_slope",
    default=None,
    metavar="BYTES",
    help="Growth per step up > BYTES: a regression.  [default: 64K]",
)
def compare(base: str, new: str, max_step: float | None, max_slope: str | None) -> None:
    """Compare two JSON reports (profile: step time per rank and phase; memleak: memory growth per step).

    \b
    Exit 0: no regression; 1: a regression; 2: bad input.
    ddpdoctor profile --steps 50 --json new.json train.py
    ddpdoctor compare base.json new.json --max-step-time-regression 10
    """
    from ddpdoctor.compare import compare as run_compare
    from ddpdoctor.compare import parse_bytes

    result = run_compare(base, new, max_step, parse_bytes(max_slope) if max_slope is not None else None)
    click.echo("\n".join(result.lines))
    sys.exit(result.exit_code)
