"""The hang judge's core, shared by every kind of evidence: who waits for whom, and which ranks are at the
ends of those chains. Pure, stdlib only.

The evidence (the flight recorder's counts per group and sequence id today; the ledger's sequences and the
stacks' waits are to follow) says, for every rank that waits, which ranks it waits for: in a collective,
the members that have not issued it (or left no record); in a p2p op, its peer unless the peer waits in the
matching op. A rank that waits for ranks that wait in turn is a victim of whatever stops the last of them.
The ranks at the ends of the chains wait for nobody: a rank behind (nothing pending, an empty record), one
without records, or one stuck inside an op every rank it needs has issued. Those are the first suspects;
with none (every chain is a cycle), the ranks diverged: an extra call or a mismatch, not a straggler.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def reached(waits: Mapping[int, Iterable[int]]) -> set[int]:
    """Every rank some waiting rank waits for, directly or through other waiting ranks."""
    seen: set[int] = set()
    todo = [p for u in waits.values() for p in u]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        todo.extend(waits.get(p, ()))
    return seen


def chain_ends(waits: Mapping[int, Iterable[int]], unknown: Iterable[int] = ()) -> list[int]:
    """The ranks waited for (directly or through a chain) that wait for nobody themselves. ``unknown``:
    ranks whose wait the evidence cannot resolve (a group whose members nobody recorded); they end no
    chain, since they may well wait for someone."""
    blind = set(unknown)
    return sorted(p for p in reached(waits) if not list(waits.get(p, ())) and p not in blind)
