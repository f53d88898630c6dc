"""The hang judge's evidence model: every source's account of the ranks, in one form. Pure, stdlib only.

Before the judge (judge.py) asks who waits for whom, each source is read into one ``RankFacts`` per rank
(analysis/hang/sources/): the ledger's rank states (``sources.ledger``), torch's flight-recorder dumps
(``sources.flight``) and the stacks py-spy took of an attached job (``sources.stacks``). A fact holds what its
source can tell and nothing more: a dump names a pending call's group and position but not the line a rank
runs now; a stack names the line but no position; the ledger names both. Where a source cannot say, the field
is empty, and the judge treats it as unknown rather than as agreement.

A rank with no records at all is a ``MISSING`` fact, never an absent key: the judge may find that others
wait for it, and a report must name it either way.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Final

# Where a rank stands.
WAITING: Final = "waiting"  # inside a call (a collective, a p2p op, DDP's all-reduce) that has not returned
RUNNING: Final = "running"  # outside any call: compute, data loading, Python; or nothing pending in its records
ENDED: Final = "ended"  # finished, crashed or gone: it issues nothing more
MISSING: Final = "missing"  # no records of it at all: what it did is unknown


@dataclass(frozen=True)
class Call:
    """One call a rank issued: its op, its group and position where the source knows them, its peer where
    it is a p2p op, the user's lines it was made from (innermost first) and what must agree across ranks."""

    op: str
    group: str | None = None
    seq: int | None = None  # its position in the group's collective sequence
    p2p: bool = False
    peer: tuple[str, int] | None = None  # a p2p op's (send|recv, the peer's global rank), where known
    sites: tuple[Hashable, ...] = ()
    key: Hashable = None  # the op and what of its arguments must agree (shapes, dtypes)

    def place(self) -> tuple:
        """Where the call waits, for telling whether ranks wait in the same one: its group and position
        where known; else (stacks) its op and innermost line."""
        if self.seq is not None:
            return ("seq", self.group, self.seq)
        return ("site", self.op, self.sites[0] if self.sites else None)


@dataclass(frozen=True)
class RankFacts:
    """What one source says of one rank: where it stands, the call it waits in (``None``: the source cannot
    say which), per group the last position it issued (its pending call's included; a group it takes part
    in), and per group its oldest p2p op that has not completed."""

    rank: int
    state: str
    pending: Call | None = None
    issued: Mapping[str, int] = field(default_factory=dict)
    open_p2p: Mapping[str, Call] = field(default_factory=dict)
