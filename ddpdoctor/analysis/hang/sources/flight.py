"""Torch's flight-recorder dumps as the judge's facts: per rank, its oldest call that has not completed
(``Stand``), the last position it enqueued on each group, its open p2p ops with their peers; a rank the
world names that left no dump is ``MISSING``. Pure; never imports torch (the dumps are already read)."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from ddpdoctor.analysis.hang.facts import MISSING, RUNNING, WAITING, Call, RankFacts
from ddpdoctor.analysis.hang.programs import Step
from ddpdoctor.postmortem.flight import Dump, Entry, Kind, agreement
from ddpdoctor.postmortem.inputs import Inputs
from ddpdoctor.record.paths import LIB_MARKERS, callers_start, is_user_path


@dataclass(frozen=True)
class Stand:
    """Where one rank that left a dump stands: its oldest collective not completed, and its last one."""

    rank: int
    pending: Entry | None
    last: Entry | None


def user_frame(e: Entry | Kind | None) -> tuple[str, int, str] | None:
    """The innermost frame of the user's code in an entry's stack (torch records innermost first) that called
    into torch.distributed."""
    got = user_frames(e)
    return got[0] if got else None


def user_frames(e: Entry | Kind | None) -> list[tuple[str, int, str]]:
    """Every frame of the user's code in an entry's stack outside torch.distributed's call, innermost first."""
    frames = list(e.frames) if e else []
    frames = frames[callers_start([f.file for f in frames]) :]
    return [(f.file, f.line, f.func) for f in frames if is_user_path(f.file, lib_markers=LIB_MARKERS)]


def made_before(d: Dump, c: Call) -> bool:
    """Whether a rank's dump holds a call at ``c``'s line (its innermost user frame) before ``c``'s position on
    its group (on another group, or a p2p op: anywhere in the ring): the rank made that call before, so no rank
    test kept it out of it (``judge.rank_test``'s ``reached``). Only a dump whose entries carry frames can say."""
    first: Any = c.sites[0] if c.sites else None
    if not first or not d.stacks:
        return False
    site = (str(first[0]), int(first[1]))
    at = {i for i, k in enumerate(d.kinds) if (f := user_frame(k)) is not None and f[:2] == site}
    if not at:
        return False
    for i, k in enumerate(d.kind):
        if k in at:
            kind = d.kinds[k]
            if kind.is_p2p or kind.group != c.group or c.seq is None or d.seq[i] < c.seq:
                return True
    return False


def completed_anywhere(dumps: Collection[Dump]) -> dict[str, int]:
    """Per group, the highest sequence id any rank completed."""
    done: dict[str, int] = {}
    for d in dumps:
        for pg_id, st in d.pg_status.items():
            g = d.group_of(pg_id)
            done[g] = max(done.get(g, -1), d.status_seq(g, st.last_completed))
    return done


def stand(d: Dump, done: dict[str, int] | None = None) -> Stand:
    """The rank's oldest pending collective (the one it blocks in) and its newest entry; ``done`` (per
    group, the highest sequence id any rank completed) clears collectives other ranks saw complete."""
    # only an entry the rank's own records leave open can be pending; the ring is oldest first, so the first
    # one ``done`` does not clear is the oldest
    kinds, kind, seq = d.kinds, d.kind, d.seq
    for i in d.open_index:
        k = kinds[kind[i]]
        if done and not k.is_p2p and seq[i] <= done.get(k.group, -1):
            # another rank completed it: a collective completes on one rank only once every rank joined, so
            # this rank's own bookkeeping merely lagged (gloo marks the work done after wait() has returned)
            continue
        return Stand(d.rank, d.entry(i), d.last())
    return Stand(d.rank, None, d.last())


def used_groups(d: Dump) -> set[str]:
    """Groups the rank issued a collective on (in its ring or its pg_status)."""
    return set(d.used) | {d.group_of(p) for p, st in d.pg_status.items() if st.last_enqueued > 0}


def members(inp: Inputs, group: str, world: Collection[int]) -> set[int]:
    """The ranks of ``group``: pg_config where the dumps name them (NCCL), else the ranks whose dumps
    use it, and every rank for the default group ("0")."""
    for d in inp.dumps.values():
        if group in d.pg_ranks:
            return set(d.pg_ranks[group])
    if group == "0":
        return set(world)
    return {r for r, d in inp.dumps.items() if group in used_groups(d)} | {
        r for r, d in inp.dumps.items() if any(d.group_of(p) == group for p in d.pg_status)
    }


_P2P = re.compile(r"^(send|recv) (\d+)(?:->|<-)(\d+)$")  # NCCL's "send 0->3" / "recv 3<-0": group-local ranks


def peer(inp: Inputs, r: int, e: Entry) -> tuple[str, int] | None:
    """(send|recv, the peer's global rank) of a p2p entry, from its op name and the group's ranks in
    pg_config (in group order); None where either is unknown."""
    m = _P2P.match(e.op)
    if not m:
        return None
    ranks = next(
        (d.pg_ranks[e.group] for d in (inp.dumps.get(r), *inp.dumps.values()) if d and e.group in d.pg_ranks), ()
    )
    q = int(m.group(3))  # "send me->peer", "recv me<-peer": the peer is the second
    return (m.group(1), ranks[q]) if q < len(ranks) else None


def call(inp: Inputs, r: int, e: Entry) -> Call:
    """Rank ``r``'s entry ``e`` as the judge's call: p2p sequence ids count every peer of a group, so a p2p
    op's position is left out and its peer named instead."""
    return Call(
        e.op,
        e.group,
        None if e.is_p2p else e.seq,
        p2p=e.is_p2p,
        peer=peer(inp, r, e) if e.is_p2p else None,
        sites=tuple(f[:2] for f in user_frames(e)),
        key=agreement(e),
    )


def facts(inp: Inputs, stands: Mapping[int, Stand], missing: Collection[int]) -> dict[int, RankFacts]:
    """One fact per rank: waiting in its pending call, running where its dump has nothing pending (behind,
    busy outside any collective: the dump cannot say where), missing where it left no dump."""
    out: dict[int, RankFacts] = {r: RankFacts(r, MISSING) for r in missing}
    for r, d in inp.dumps.items():
        p2p: dict[str, Call] = {}
        for i in d.open_index:  # a p2p op is completed where its own rank says so (``done`` counts collectives)
            k = d.kinds[d.kind[i]]
            if k.is_p2p and k.group not in p2p:
                p2p[k.group] = call(inp, r, d.entry(i))
        s = stands.get(r)
        if s is not None and s.pending is not None:
            out[r] = RankFacts(r, WAITING, call(inp, r, s.pending), d.issued, p2p)
        else:
            out[r] = RankFacts(r, RUNNING, None, d.issued, p2p)
    return out


def programs(dumps: Mapping[int, Dump]) -> dict[int, list[Step]] | None:
    """Each rank's collectives in the order it issued them, every group's (p2p ops left out), as the program
    judge (programs.py) compares them: what must agree is the op, its compared sizes, its dtypes and the
    group's kind (its mesh dimension, ``mesh_tp``; else its name), never the frames a JSON dump lacks; the line
    is the entry's innermost user frame where it has one. None where a ring lost its oldest entries (its
    first record id is not 0): the orders would not start together."""
    out: dict[int, list[Step]] = {}
    for r, d in dumps.items():
        if d.n_entries and d.rid[0] != 0:
            return None
        steps = []
        for i in range(d.n_entries):
            e = d.entry(i)
            if e.is_p2p:
                continue
            kind = e.group_desc if e.group_desc.startswith("mesh_") else e.group
            agree = (*agreement(e), kind)
            steps.append(Step(e.op, user_frame(e), e.group, e.seq, agree))
        out[r] = steps
    return out


def descs(dumps: Mapping[int, Dump]) -> dict[str, str]:
    """Each group's description (``mesh_tp`` where a DeviceMesh made it), by group name."""
    out: dict[str, str] = {}
    for d in dumps.values():
        for k in d.kinds:
            if k.group_desc:
                out.setdefault(k.group, k.group_desc)
    return out
