"""The live verdict while a run goes on: is the current wait a certain deadlock, a timeout, or nothing
yet; and the one status line the monitor prints. Pure.

A wait is *certain* to be a deadlock when a rank has waited at least ``settle`` seconds in a collective
that its peers cannot match: a peer has exited, waits in a different collective (other sequence
position, op or shape), or has already issued a different collective at that position (DDP's
all-reduces count: they move the sequence counter). Otherwise a wait is *uncertain* and becomes a hang
only after ``timeout`` seconds.
"""

from __future__ import annotations

from typing import Any

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Location, ranks_phrase
from ddpdoctor.analysis.state import P2P, RECVS, SHAPED, RankState, all_states, describe_op, ledger_entry_at
from ddpdoctor.record.reader import RunRecord


def op_key(p: dict[str, Any]) -> tuple:
    """What must agree for two ranks' pending collectives to be the same call: the op (shapes, dtypes)."""
    op = p.get("op")
    return (
        op,
        tuple(map(tuple, p.get("shapes") or ())) if op in SHAPED else None,
        tuple(p.get("dtypes") or ()) if op in SHAPED else None,
    )


def certain_deadlock(record: RunRecord, states: dict[int, RankState], cfg: Config, now: float) -> str | None:
    """A one-line reason when the current waits can never complete, else None."""
    live = [s for s in states.values() if not s.ended and s.state != "not-started"]
    waiting = [s for s in live if s.proof_waiting and not s.stale and s.since and now - s.since >= cfg.settle]
    if (
        live
        and len(waiting) == len(live)
        and len(live) == len(states)
        and all((s.pending or {}).get("op") in RECVS and not (s.pending or {}).get("sends") for s in live)
    ):
        # every rank waits to receive and none has a send outstanding: nobody can ever send
        text = "; ".join(
            f"{waits_text(s, now)}"
            + (f" from rank {(s.pending or {}).get('peer')}" if (s.pending or {}).get("peer") is not None else "")
            for s in live[:4]
        )
        return f"{text}; every rank waits to receive and none sends"
    for a in waiting:
        p = a.pending or {}
        op, g, seq = p.get("op"), p.get("group"), p.get("seq")
        if op in P2P:
            continue
        what = waits_text(a, now)
        pos = "" if a.blocked is not None else f" (#{seq})"
        for b in states.values():
            if b.rank == a.rank or not b.seq or g not in b.seq:
                continue  # not (known to be) a member of that group
            if b.ended:
                # still waiting, as seen by a heartbeat written well after the peer ended
                if b.ended_t is None or (a.hb_t or 0) - b.ended_t >= cfg.settle:
                    return f"{what}; rank {b.rank} has exited"
                continue
            if b.stale or b.state == "not-started":
                continue
            if b.proof_waiting:
                q = b.pending or {}
                if not b.since or now - b.since < cfg.settle or q.get("op") in P2P:
                    continue
                if q.get("group") != g:
                    if all(s in waiting for s in live):
                        return f"{what} on group {g}; rank {b.rank} waits on group {q.get('group')}"
                    continue
                if q.get("seq") != seq or op_key(q) != op_key(p):
                    return (
                        f"{what}{pos}; rank {b.rank} waits in "
                        f"{describe_op(q.get('op'), q.get('shapes'))} (#{q.get('seq')})"
                    )
                continue
            bs = b.seq.get(g)
            if seq is not None and bs is not None and bs >= seq and b.seq_stable_for >= cfg.settle:
                e = ledger_entry_at(record.ranks[b.rank], g, seq)
                if e is None or op_key(e) != op_key(p):
                    other = describe_op(e.get("op"), e.get("shapes")) if e else "a DDP all-reduce"
                    return f"{what}{pos}; rank {b.rank} issued {other} at that position"
    return None


def waits_text(s: RankState, now: float) -> str:
    """ "rank 0 waits 3.1 s in all_reduce(4)", or for a rank blocked at a sync point "rank 0 is blocked
    3.1 s at train.py:57 waiting for all_reduce(4) #38 issued at train.py:74"."""
    p = s.pending or {}
    op = describe_op(p.get("op"), p.get("shapes"))
    if s.blocked is not None:
        return (
            f"rank {s.rank} is blocked {now - (s.since or now):.1f} s at {_at(s.blocked)} waiting for "
            f"{op} #{p.get('seq')} issued at {_at(s.where)}"
        )
    return f"rank {s.rank} waits {now - (s.since or now):.1f} s in {op}"


def anyone_waiting(record: RunRecord, cfg: Config, now: float) -> bool:
    """Has some rank sat in a collective (or DDP backward) long enough that a verdict may be near?"""
    for s in all_states(record, now, cfg).values():
        if s.state == "waiting" and s.since and now - s.since >= cfg.settle / 2:
            return True
        if s.state == "ddp-wait" and s.seq_stable_for >= cfg.settle / 2:
            return True
        if s.ended:
            return True
        if s.state == "busy" and s.stalled_for >= cfg.timeout / 2:
            return True  # the no-progress rule needs the ledgers (is an async Work outstanding?)
    return False


def live_verdict(record: RunRecord, cfg: Config, now: float) -> tuple[str, str] | None:
    """("certain", reason) or ("timeout", reason) when the monitor should stop the run."""
    states = all_states(record, now, cfg)
    reason = certain_deadlock(record, states, cfg, now)
    if reason:
        return "certain", reason
    world = record.world_size or 0
    if states and world > len(states) and all(s.ended for s in states.values()):
        # this node's ranks are done but torchrun waits (its exit barrier) for ranks it cannot see
        last = max((s.ended_t or 0.0) for s in states.values())
        if last and now - last >= cfg.timeout:
            unseen = [r for r in range(world) if r not in states]
            return "timeout", (
                f"every rank on this node ended {now - last:.0f} s ago; torchrun still waits for "
                f"{ranks_phrase(unseen)} on other nodes"
            )
    live = [s for s in states.values() if not s.ended and s.state != "not-started"]
    if live and all(s.state == "busy" and not s.stale and s.stalled_for >= cfg.timeout for s in live):
        # nobody is inside a collective, yet nobody moves (no step, no collective issued or completed, no
        # CPU time): blocked at a sync point (Work.wait(), .item()) or stuck; never a silent hang
        return "timeout", (
            f"no rank made progress (no step, no collective, no CPU time) for "
            f"{min(s.stalled_for for s in live):.0f} s (--timeout {cfg.timeout:g})"
        )
    for s in states.values():
        if s.ended or s.stale:
            continue
        waited = (
            (now - s.since)
            if (s.state == "waiting" and s.since)
            else (s.seq_stable_for if s.state == "ddp-wait" else 0.0)
        )
        if waited >= cfg.timeout:
            return "timeout", f"rank {s.rank} waited {waited:.0f} s (--timeout {cfg.timeout:g})"
    return None


def status_line(record: RunRecord, cfg: Config, now: float) -> str | None:
    """The live line shown while some rank waits: who waits where, who is busy where."""
    states = all_states(record, now, cfg)
    parts, anyone_waits = [], False
    for s in states.values():
        if s.state == "waiting" and s.since and now - s.since >= 2.0:
            anyone_waits = True
            p = s.pending or {}
            parts.append(
                f"rank {s.rank} blocked {now - s.since:.0f} s at {_at(s.blocked)} waiting for "
                f"{p.get('op')} #{p.get('seq')}"
                if s.blocked
                else f"rank {s.rank} waiting {now - s.since:.0f} s in {p.get('op')} at {_at(s.where)}"
            )
        elif s.state == "ddp-wait" and s.seq_stable_for >= 2.0:
            anyone_waits = True
            parts.append(f"rank {s.rank} in DDP backward {s.seq_stable_for:.0f} s at {_at(s.where)}")
        elif s.state == "busy":
            parts.append(f"rank {s.rank} busy at {_at(s.where)}")
        elif s.ended:
            parts.append(f"rank {s.rank} {s.state}")
    return "; ".join(parts) if anyone_waits else None


def _at(where: Location | None) -> str:
    return f"{where.file.rsplit('/', 1)[-1]}:{where.line}" if where else "?"
