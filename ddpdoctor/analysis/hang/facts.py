"""The hang judge's evidence model: every source's account of the ranks, in one form. Pure: the stdlib and
the record schema's vocabulary only.

Before the judge (judge.py) asks who waits for whom, each source is read into one ``RankFacts`` per rank
(analysis/hang/sources/): the ledger's rank states (``sources.ledger``), torch's flight-recorder dumps
(``sources.flight``) and the stacks py-spy took of an attached job (``sources.stacks``). A fact holds what its
source can tell and nothing more: a dump names a pending call's group and position but not the line a rank
runs now; a stack names the line but no position; the ledger names both. Where a source cannot say, the field
is empty, and the judge treats it as unknown rather than as agreement.

A rank with no records at all is a ``MISSING`` fact, never an absent key: the judge may find that others
wait for it, and a report must name it either way.

The sources that know positions (the ledger, the dumps) also give, per rank, the ``Slot`` it holds at each
position of a group's sequence: the one form the judge's walk to the first parting (judge.partings) reads.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ddpdoctor.record.schema import P2P, RECVS, SHAPED

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
    # seen by torch's flight recorder, not by ddpdoctor's wrappers: it may be a call torch made itself (DDP's
    # bucket all-reduce), so a peer whose ledger holds no Python call at its position proves nothing
    recorder: bool = False

    @property
    def receives(self) -> bool:
        """A point-to-point receive (``recv``, or an ``irecv`` whose Work the rank waits on)."""
        return self.op in RECVS

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
    in), per group its oldest p2p op that has not completed, and whether a send of its own is outstanding
    (``sending``: an ``isend`` whose Work has not completed, where the source tracks them: the ledger's).

    A look at a running job (the live monitor's) adds when it last saw the rank as it stands (``seen``: a
    waiting rank's last heartbeat, an ended rank's end) and whether that look has held still long enough to
    judge by (``steady``: a fresh heartbeat, counts unchanged for the settle time); a post-mortem's records
    are final, so they are steady."""

    rank: int
    state: str
    pending: Call | None = None
    issued: Mapping[str, int] = field(default_factory=dict)
    open_p2p: Mapping[str, Call] = field(default_factory=dict)
    sending: bool = False
    seen: float | None = None
    steady: bool = True


@dataclass(frozen=True)
class RankTest:
    """An ``if`` that tests the rank (``if rank == 0:``, ``if accelerator.is_main_process:``) on a rank's way to
    its call: the frame under it (``file``, ``line``: the call's own line, or a caller's on the rank's stack),
    the test's line, the ranks that take that branch (``None``: the test does not say) and the first and last
    line of that branch. Read from the source files (analysis/hang/paths.py) where they are readable."""

    file: str
    line: int
    test: int
    ranks: frozenset[int] | None = None
    branch: tuple[int, int] = (0, 0)

    def admits(self, rank: int) -> bool:
        """Rank ``rank`` may take the branch this test leads to: the test says so, or does not say. A test that
        leaves out the rank that got there is no way of its own (the file changed since the job ran)."""
        return self.ranks is None or rank in self.ranks

    def holds(self, other: RankTest) -> bool:
        """``other``'s test sits inside the branch this test led to: every rank ``other`` led somewhere took
        this branch too, so this test is no rank's own against it (``if local_rank != -1:`` around the whole
        step, and ``if rank == 0:`` inside it)."""
        return self.file == other.file and self.branch[0] <= other.test <= self.branch[1]


# What a rank holds at a position where it holds no call of its own.
INTERNAL: Final = "<ddp/internal>"  # a position its counter passed with no Python call: DDP's C++ collective
ABSENT: Final = "<never issued>"  # nothing at this position: the rank never got there, or its record is gone
AWAY: Final = "<waits in another group>"  # a live rank with nothing at this position: it waits elsewhere
UNRECORDED: Final = "<unrecorded>"  # a call proven made (gloo's size-mismatch abort) by a rank whose record is gone


def agreement(op: Any, shapes: Any = None, dtypes: Any = None) -> tuple:
    """What must agree across ranks for two calls to be the same call: the op, and for a shaped collective its
    input shapes and dtypes. The one definition: the ledger's walk (``Slot.key``), the live proof
    (analysis/live.py) and the program judge ask it; the dumps' signature adds what only they record."""
    shaped = op in SHAPED
    return (
        op,
        tuple(map(tuple, shapes or ())) if shaped else None,
        tuple(dtypes or ()) if shaped else None,
    )


def agreement_of(call: Mapping[str, Any]) -> tuple:
    """``agreement`` of a call recorded as a mapping (a heartbeat's pending call, a ledger entry: ``op``,
    ``shapes``, ``dtypes``)."""
    return agreement(call.get("op"), call.get("shapes"), call.get("dtypes"))


@dataclass(frozen=True)
class Slot:
    """What one rank issued at one position of a group's sequence: the op, its line, its shapes, and what
    must agree across ranks where the source computes it (``agree``: the dumps' signature of every entry at
    the position, a coalesced group's included). Without ``agree``, what must agree is ``agreement``: the op,
    and the shapes and dtypes of a shaped collective."""

    op: str
    site: tuple[Any, ...] | None = None  # the user's line: (file, line[, function])
    shapes: Any = None
    agree: Hashable = None
    dtypes: Any = None

    def key(self) -> Hashable:
        """What must agree across ranks at this position (``agreement``, unless the source computed it)."""
        if self.agree is not None:
            return self.agree
        return agreement(self.op, self.shapes, self.dtypes)

    @property
    def p2p(self) -> bool:
        """A point-to-point op: matched by its peer, never by position."""
        return self.op in P2P
