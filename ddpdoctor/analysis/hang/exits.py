"""Which way out of a loop a rank took, when the record holds no frame of it. Pure.

A rank that left the loop the others are still in and then finished keeps no stack: the way it left is
one of the loop's ``break``/``return``/``sys.exit`` lines. When some of them sit under a test of the rank
(``if ddp_rank == 1 and ...: break``), a rank-dependent exit is what only some ranks take, and the
others' exits (``if iter_num > max_iters: break``) are the ones every rank takes together.
"""

from __future__ import annotations

from collections.abc import Iterable

from ddpdoctor.analysis.findings import Location
from ddpdoctor.analysis.hang.paths import rank_test


def rank_exits(path: str, exits: tuple[int, ...], rank: int | None = None, world: int = 0) -> tuple[int, ...]:
    """The ways out of a loop (``exits``: its break/return/sys.exit lines in ``path``) that a rank which left it
    while the others stayed may have taken: the ones under a rank test, when there are any; else ``exits``
    unchanged. With the rank that left (``rank``, in a world of ``world`` ranks): the ones under a rank test
    that lets it take them (``RankTest.admits``: ``if ddp_rank == 1 and ...: break`` is rank 1's way out, not
    rank 0's); else the ones under no rank test; else ``exits``.

    The one body of "where a rank left": the ledger's post-mortem (a finished rank that kept no stack, and a
    rank that left the loop and waits after it) and the stacks ``attach`` took (a rank gone from the stacks,
    and one waiting after the loop) ask it of their leavers (analysis/hang/deadlock.py, attach.py)."""
    tests = {x: rank_test([(path, x)], world) for x in exits}
    own = tuple(x for x in exits if (t := tests[x]) is not None and (rank is None or t.admits(rank)))
    if own or rank is None:
        return own or exits
    return tuple(x for x in exits if tests[x] is None) or exits


def ways_out(
    path: str, exits: tuple[int, ...], leavers: Iterable[int], world: int
) -> tuple[list[Location], tuple[int, ...]]:
    """Each leaver's ways out (``rank_exits``) as its locations (the first three; certain where there is one),
    and every leaver's ways out together, for the words."""
    locs: list[Location] = []
    every: set[int] = set()
    for r in leavers:
        mine = rank_exits(path, exits, r, world)
        role = "left the loop here" if len(mine) == 1 else "may have left the loop here"
        locs += [Location(r, path, x, "", role) for x in mine[:3]]
        every.update(mine)
    return locs, tuple(sorted(every))
