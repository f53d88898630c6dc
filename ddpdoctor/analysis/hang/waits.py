"""Hangs without a divergence: every rank waits to receive, a timeout, a transport stall; and the words
and places the hang findings use for where each rank stands. Pure."""

from __future__ import annotations

from typing import Any

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, Location, analyze_command, group_values, ranks_phrase, unseen_phrase
from ddpdoctor.analysis.hang import judge
from ddpdoctor.analysis.hang.divergence import ABSENT, AWAY, INTERNAL
from ddpdoctor.analysis.hang.facts import UNRECORDED
from ddpdoctor.analysis.hang.hints import BLOCKED_HINT, HINTS, P2P_HINT
from ddpdoctor.analysis.hang.sources.ledger import facts as ledger_facts
from ddpdoctor.analysis.ids import HANG_P2P_DEADLOCK, HANG_TIMEOUT, HANG_TRANSPORT_STALL
from ddpdoctor.analysis.state import RankState, describe_op, loc
from ddpdoctor.record.reader import RunRecord


def slot_loc(record: RunRecord, rank: int, slot: Any, states: dict[int, RankState], role: str) -> Location | None:
    """Where a rank's slot of a divergence was issued; its last collective when it exited, else where it is."""
    if slot is not None and slot.site:
        return loc(rank, list(slot.site), role)
    if slot is not None and slot.op == ABSENT:
        last = next((e for e in reversed(record.ranks[rank].ledger) if e.get("site")), None)
        if last:
            return loc(rank, last["site"], "exited after its last collective here")
    return best_where(record, states[rank], role)


def best_where(record: RunRecord, st: RankState, role: str) -> Location | None:
    """Where a rank stands: its pending collective, else the user line of its error, else its last line."""
    site = (st.pending or {}).get("site")
    err = record.ranks[st.rank].error
    if not site and err:
        site = err.get("user_frame")
    l = loc(st.rank, site, role)
    if l is None and st.where:
        l = Location(st.rank, st.where.file, st.where.line, st.where.func, role)
    return l


def receive_cycle(states: dict[int, RankState]) -> Finding | None:
    """Every rank waits to receive (``recv``, or ``irecv`` whose Work it waits on) and none has a send
    outstanding: no message can ever arrive (``judge.receive_cycle`` over the ranks' facts), in the ledger's
    words: each rank's receive, its peer and its line."""
    ranks = judge.receive_cycle(ledger_facts(states))
    if ranks is None:
        return None
    parts: dict[int, str] = {}
    locs: list[Location] = []
    for s in (states[r] for r in ranks):
        p = s.pending or {}
        peer = p.get("peer")
        src = f" from rank {peer}" if peer is not None else ""
        if s.blocked is not None:
            parts[s.rank] = (
                f"blocked at {at(s.blocked)}{code(s.blocked)} waiting for {p.get('op')}{src} issued at {at(s.where)}"
            )
            locs.append(s.blocked)
        else:
            parts[s.rank] = f"in {p.get('op')}{src} at {at(s.where)}"
        if s.where:
            locs.append(Location(s.rank, s.where.file, s.where.line, s.where.func, "waiting"))
    return Finding(
        HANG_P2P_DEADLOCK,
        "error",
        f"every rank waits to receive and none sends: {group_values(parts)}",
        P2P_HINT,
        tuple(sorted(states)),
        tuple(locs),
        {"ranks": sorted(parts)},
        culprits=tuple(sorted(parts)),
    )


def slot_text(sl: Any) -> str:
    """What a rank issued at a divergence: ``all_reduce [4] float32 at train.py:12``."""
    if sl.op == INTERNAL:
        return "a DDP all-reduce/broadcast"
    if sl.op == ABSENT:
        return "nothing (exited)"
    if sl.op == UNRECORDED:
        return "a call of another size (its record is missing)"
    if sl.op == AWAY:
        return "nothing: it waits in another group's collective" + (
            f" at {sl.site[0].rsplit('/', 1)[-1]}:{sl.site[1]}" if sl.site else ""
        )
    site = f" at {sl.site[0].rsplit('/', 1)[-1]}:{sl.site[1]}" if sl.site else ""
    return f"{describe_op(sl.op, sl.shapes)}{site}"


def at(where: Location | None) -> str:
    """``train.py:12`` (``?`` when unknown)."""
    return f"{where.file.rsplit('/', 1)[-1]}:{where.line}" if where else "?"


def code(where: Location | None) -> str:
    """`` (`work.wait()`)``: the source line, read from the user's file."""
    import linecache

    text = linecache.getline(where.file, where.line).strip() if where else ""
    if " #" in text:
        text = text[: text.index(" #")].rstrip()
    return f" (`{text[:60]}`)" if text else ""


def state_text(s: RankState) -> str:
    """Where a rank stands in words: blocked at a sync point, waiting in a collective, busy at a line."""
    if s.state == "waiting" and s.blocked is not None:
        p = s.pending or {}
        return (
            f"blocked at {at(s.blocked)}{code(s.blocked)} waiting for {describe_op(p.get('op'), p.get('shapes'))}"
            f" #{p.get('seq')} issued at {at(s.where)}"
        )
    if s.state == "waiting":
        return f"waiting in {(s.pending or {}).get('op')} at {at(s.where)}"
    if s.state == "ddp-wait":
        return f"in the DDP all-reduce at {at(s.where)}"
    return f"{s.state} at {at(s.where)}" if s.where else s.state


def waits_for(states: dict[int, RankState]) -> tuple[dict[int, set[int]], set[int]]:
    """Who each rank waiting in a collective waits for, from the ranks' own counts: the ledger's facts
    (sources/ledger.py) judged by ``judge.waits_graph``, the rule the flight recorder's and the stacks'
    judgements use. Returns (waits, unknown): ``unknown`` holds the waiting ranks whose wait the records
    cannot resolve (a p2p op, DDP's own all-reduce, no position)."""
    return judge.waits_graph(ledger_facts(states))


def timeout_finding(record: RunRecord, states: dict[int, RankState], now: float, cfg: Config, ev: dict) -> Finding:
    """No divergence to explain a stop on --timeout: a transport stall, ranks blocked outside any
    collective, or the waiting and busy ranks (and the ranks this node cannot see)."""
    waiting = [s for s in states.values() if s.state in ("waiting", "ddp-wait")]
    busy = [s for s in states.values() if s.state == "busy"]
    world = record.world_size or len(states)
    unseen = [r for r in range(world) if r not in states]
    facts = ledger_facts(states)
    # every rank in one call, and the calls agree: a stall (a mismatch there is the divergence walk's)
    same = (
        not unseen
        and judge.one_place(facts.values())
        and len({f.pending.key for f in facts.values() if f.pending is not None}) == 1
    )
    locs = [Location(s.rank, s.where.file, s.where.line, s.where.func, "waiting") for s in waiting if s.where]
    locs += [Location(s.rank, s.where.file, s.where.line, s.where.func, "busy") for s in busy if s.where]
    if same:
        p = waiting[0].pending or {}
        return Finding(
            HANG_TRANSPORT_STALL,
            "error",
            f"all ranks inside the same {p.get('op')} (#{p.get('seq')}) for over {cfg.timeout:g} s",
            HINTS[HANG_TRANSPORT_STALL],
            tuple(sorted(states)),
            tuple(locs),
            ev,
        )
    if busy and not waiting and str(ev.get("reason") or "").startswith("no rank made progress"):
        # blocked outside any collective call: Work.wait(), a receive, a sync point
        text = group_values({s.rank: f"blocked at {at(s.where)}{code(s.where)}" for s in busy})
        locs = [Location(s.rank, s.where.file, s.where.line, s.where.func, "blocked") for s in busy if s.where]
        return Finding(
            HANG_TIMEOUT,
            "error",
            f"no rank made progress for {cfg.timeout:g} s: {text}",
            BLOCKED_HINT,
            tuple(sorted(states)),
            tuple(locs),
            ev,
            culprits=tuple(sorted(s.rank for s in busy)),
        )
    # the busy ranks a waiting rank waits for, directly or through ranks that wait in turn: the first suspects
    # by the rule the flight recorder's judgement uses; a busy rank nobody waits for (another pipeline stage
    # in its own compute, a rank whose async call was issued) is not one. Where the counts name none of them
    # (positions unknown), every busy rank is
    unmet, unknown = judge.waits_graph(facts)
    ends = set(judge.chain_ends(unmet, unknown))
    suspects = [s for s in busy if s.rank in ends] or busy
    if suspects != busy:
        ev = dict(ev, waits_for={str(r): sorted(u) for r, u in sorted(unmet.items()) if u})
    text = group_values({s.rank: state_text(s) for s in waiting + busy}, first=[s.rank for s in suspects])
    if not waiting and not busy:
        text = f"{ranks_phrase(states)} on this node ended" + (
            f" ({group_values({s.rank: s.state for s in states.values()}, bare=True)})" if states else ""
        )
    # stopped on a deadlock's proof (every rank waits on a call another has not issued), not on --timeout:
    # the run may have waited a second, and "for 60 s" would be untrue
    span = "(the ranks wait on each other)" if ev.get("live") == "deadlock" else f"for {cfg.timeout:g} s"
    msg = f"no progress {span}: {text}"
    hint = HINTS[HANG_TIMEOUT]
    if unseen:
        # another node's ranks: this monitor cannot see them, so it cannot tell a stall from a divergence
        from ddpdoctor.analysis.hang.damage import one_node

        msg += f"; {unseen_phrase(unseen, gone=one_node(record))}"
        hint = (
            "This node sees only its own ranks. Run ddpdoctor analyze with every node's run directory, "
            f"{analyze_command(record.run_dir)}, to find the rank that diverged."
        )
        ev = dict(ev, unseen_ranks=unseen)
    return Finding(
        HANG_TIMEOUT,
        "error",
        msg,
        hint,
        tuple(sorted(states)),
        tuple(locs),
        ev,
        culprits=tuple(sorted(s.rank for s in suspects)),
    )
