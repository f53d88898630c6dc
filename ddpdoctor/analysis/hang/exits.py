"""Which way out of a loop a rank took, when the record holds no frame of it. Pure.

A rank that left the loop the others are still in and then finished keeps no stack: the way it left is
one of the loop's ``break``/``return``/``sys.exit`` lines. When some of them sit under a test of the rank
(``if ddp_rank == 1 and ...: break``), a rank-dependent exit is what only some ranks take, and the
others' exits (``if iter_num > max_iters: break``) are the ones every rank takes together.
"""

from __future__ import annotations

from ddpdoctor.analysis.hang.paths import _guard_at


def rank_exits(path: str, exits: tuple[int, ...]) -> tuple[int, ...]:
    """``exits`` narrowed to the ones under a rank test, when there are any; else ``exits`` unchanged."""
    guarded = tuple(x for x in exits if _guard_at(path, x) is not None)
    return guarded or exits
