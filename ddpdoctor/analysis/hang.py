"""Deadlocks and divergent collectives: the live verdict and the post-mortem diagnosis. Pure.

A wait is *certain* to be a deadlock when a rank has waited at least ``settle`` seconds in a collective
that its peers cannot match: a peer has exited, waits in a different collective (other sequence
position, op or shape), or has already issued a different collective at that position (DDP's
all-reduces count: they move the sequence counter). Otherwise a wait is *uncertain* and becomes a hang
only after ``timeout`` seconds.
"""

from __future__ import annotations

from typing import Any

from ddpdoctor.analysis.divergence import ABSENT, INTERNAL, Divergence, Slot, first_divergence
from ddpdoctor.analysis.model import Config, Finding, Location
from ddpdoctor.analysis.state import (P2P, SHAPED, SIZE_MISMATCH, RankState, all_states, describe_op,
                                      is_transport_error, ledger_entry_at, loc)
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord


def _op_key(p: dict[str, Any]) -> tuple:
    op = p.get("op")
    return (op, tuple(map(tuple, p.get("shapes") or ())) if op in SHAPED else None,
            tuple(p.get("dtypes") or ()) if op in SHAPED else None)


def certain_deadlock(record: RunRecord, states: dict[int, RankState], cfg: Config, now: float) -> str | None:
    """A one-line reason when the current waits can never complete, else None."""
    live = [s for s in states.values() if not s.ended and s.state != "not-started"]
    waiting = [s for s in live if s.proof_waiting and not s.stale and s.since and now - s.since >= cfg.settle]
    for a in waiting:
        p = a.pending or {}
        op, g, seq = p.get("op"), p.get("group"), p.get("seq")
        if op in P2P:
            continue
        what = f"rank {a.rank} waits {now - a.since:.1f} s in {describe_op(op, p.get('shapes'))}"
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
                if q.get("seq") != seq or _op_key(q) != _op_key(p):
                    return (f"{what} (#{seq}); rank {b.rank} waits in "
                            f"{describe_op(q.get('op'), q.get('shapes'))} (#{q.get('seq')})")
                continue
            bs = b.seq.get(g)
            if seq is not None and bs is not None and bs >= seq and b.seq_stable_for >= cfg.settle:
                e = ledger_entry_at(record.ranks[b.rank], g, seq)
                if e is None or _op_key(e) != _op_key(p):
                    other = describe_op(e.get("op"), e.get("shapes")) if e else "a DDP all-reduce"
                    return f"{what} (#{seq}); rank {b.rank} issued {other} at that position"
    return None


def anyone_waiting(record: RunRecord, cfg: Config, now: float) -> bool:
    """Has some rank sat in a collective (or DDP backward) long enough that a verdict may be near?"""
    for s in all_states(record, now, cfg).values():
        if s.state == "waiting" and s.since and now - s.since >= cfg.settle / 2:
            return True
        if s.state == "ddp-wait" and s.seq_stable_for >= cfg.settle / 2:
            return True
        if s.ended:
            return True
    return False


def live_verdict(record: RunRecord, cfg: Config, now: float) -> tuple[str, str] | None:
    """("certain", reason) or ("timeout", reason) when the monitor should stop the run."""
    states = all_states(record, now, cfg)
    reason = certain_deadlock(record, states, cfg, now)
    if reason:
        return "certain", reason
    for s in states.values():
        if s.ended or s.stale:
            continue
        waited = (now - s.since) if (s.state == "waiting" and s.since) else (
            s.seq_stable_for if s.state == "ddp-wait" else 0.0)
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
            parts.append(f"rank {s.rank} waiting {now - s.since:.0f} s in {p.get('op')} at {_at(s.where)}")
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


# -- post-mortem ---------------------------------------------------------------------------------------

HINTS = {
    "hang.rank-conditional-collective": (
        "Every rank must make the same collectives in the same order: move the collective out of the "
        "`if rank == ...:` block (guard only the side effect, e.g. printing or saving)."),
    "hang.early-exit": (
        "A rank left the loop (early stopping, break, return, sys.exit) while the others went on: decide "
        "to stop together, e.g. all_reduce a stop flag (MAX) and break on every rank."),
    "hang.uneven-batches": (
        "Ranks ran different numbers of DDP steps: use DistributedSampler (drop_last=True for the "
        "DataLoader if the data set does not divide evenly), or wrap the loop in "
        "`with model.join():` (torch.distributed.algorithms.Join)."),
    "hang.shape-mismatch": (
        "The ranks passed tensors of different shape or dtype to the same collective: make the sizes "
        "agree (pad, or all_gather the sizes first)."),
    "hang.divergent-collective": (
        "The ranks issued different collectives at the same position: make the code path that reaches "
        "collectives identical on every rank."),
    "hang.timeout": (
        "One rank waited in a collective while another was still busy for longer than --timeout: if the "
        "busy rank is doing rank-only work (evaluation, checkpointing), give the others the same work or "
        "raise the backend timeout; if it never arrives, see where it is."),
    "hang.transport-stall": (
        "Every rank is inside the same collective and nothing moves: a backend or network stall, not a "
        "code divergence. Check interfaces (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME), firewalls, and "
        "NCCL_DEBUG=INFO."),
}


def _slot_loc(record: RunRecord, rank: int, slot: Any, states: dict[int, RankState], role: str
              ) -> Location | None:
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


def _uneven(record: RunRecord, states: dict[int, RankState]) -> tuple[dict[int, int], dict[int, Any]] | None:
    fwd = {r: s.ddp_fwd for r, s in states.items()}
    if len(set(fwd.values())) < 2 or min(fwd.values()) == 0:
        return None
    lens: dict[int, Any] = {}
    for r, rec in record.ranks.items():
        dl = [e for e in rec.events if e.get("kind") == "dataloader"]
        if dl:
            lens[r] = dl[-1].get("len")
    return fwd, lens


def detect(record: RunRecord, cfg: Config) -> list[Finding]:
    verdict = record.monitor_event(schema.K_VERDICT)
    errors = {r: rec.error for r, rec in record.ranks.items() if rec.error}
    if any(not is_transport_error(e) for e in errors.values()):
        return []  # a real exception: crash.detect explains it, the waits are its victims
    now = float(verdict["t"]) if verdict else record.latest_t()
    states = all_states(record, now, cfg)
    if verdict is None and not errors:
        return _cut_short(record, states, now, cfg)
    div = first_divergence(record, states)
    size_err = [r for r, e in errors.items() if SIZE_MISMATCH.search(str(e.get("message", "")))]
    uneven = _uneven(record, states)
    ev = {"reason": verdict.get("reason") if verdict else None, "live": verdict.get("mode") if verdict else None}

    if div is not None and div.exclusive:
        return [_from_div(record, "hang.rank-conditional-collective", div, states, ev,
                          "a collective is called on some ranks only")]
    if div is not None and (div.kind == "shape-mismatch" or (size_err and div.kind != "exited")):
        return [_from_div(record, "hang.shape-mismatch", div, states, ev,
                          "ranks passed different shapes/dtypes to the same collective")]
    lens_differ = bool(uneven and uneven[1] and len(set(uneven[1].values())) > 1)
    if lens_differ or (uneven and not uneven[1] and (div is None or div.kind not in ("extra-call", "exited"))):
        fwd, lens = uneven  # type: ignore[misc]
        more = [r for r, n in fwd.items() if n == max(fwd.values())]
        fewer = [r for r in fwd if r not in more]
        locs = [l for r in more if (l := best_where(record, states[r], "extra step"))]
        locs += [l for r in fewer if (l := best_where(record, states[r], "ran out of batches"))]
        batch = f"; DataLoader lengths {lens}" if lens else ""
        msg = (f"uneven number of DDP steps: rank(s) {more} ran {max(fwd.values())} forward passes, "
               f"rank(s) {fewer} ran {min(fwd.values())}{batch}")
        ev.update(ddp_forwards=fwd, dataloader_len=lens)
        return [Finding("hang.uneven-batches", "error", msg, HINTS["hang.uneven-batches"],
                        tuple(sorted(fwd)), tuple(locs), ev)]
    if div is not None and div.kind == "exited":
        return [_from_div(record, "hang.early-exit", div, states, ev, "rank(s) exited while others waited")]
    if div is not None:
        return [_from_div(record, "hang.divergent-collective", div, states, ev, "ranks issued different collectives")]
    ended = [s for s in states.values() if s.state == "finished"]
    others = [s for s in states.values() if not s.ended or s.state == "crashed"]
    if ended and others:
        locs = [l for s in ended if (l := _slot_loc(record, s.rank, Slot(ABSENT), states, "exited"))]
        locs += [l for s in others if (l := best_where(record, s, "waiting"))]
        return [Finding("hang.early-exit", "error",
                        f"rank(s) {[s.rank for s in ended]} finished while rank(s) {[s.rank for s in others]} "
                        "still needed them", HINTS["hang.early-exit"], tuple(sorted(states)), tuple(locs), ev)]
    if verdict is not None:
        return [_timeout_finding(states, now, cfg, ev)]
    return []


def _cut_short(record: RunRecord, states: dict[int, RankState], now: float, cfg: Config) -> list[Finding]:
    """torchrun ended some ranks that had not finished (because another rank failed at exit, say): judge
    only what the record proves, i.e. a rank that finished while another had gone further."""
    if record.monitor_event(schema.K_EXIT) is None or record.monitor_event(schema.K_KILL) is not None:
        return []
    done = [s for s in states.values() if s.state == "finished"]
    cut = [s for s in states.values() if not s.ended and s.state != "not-started"]
    if not done or not cut:
        return []
    ev = {"reason": "ranks ended by torchrun before finishing", "live": None}
    uneven = _uneven(record, states)
    if uneven and uneven[1] and len(set(uneven[1].values())) > 1:
        fwd, lens = uneven
        more = [r for r, n in fwd.items() if n == max(fwd.values())]
        locs = [l for r in fwd if (l := best_where(record, states[r], "extra step" if r in more else
                                                    "ran out of batches"))]
        return [Finding("hang.uneven-batches", "error",
                        f"uneven number of DDP steps: DDP forwards {fwd}; DataLoader lengths {lens}",
                        HINTS["hang.uneven-batches"], tuple(sorted(fwd)), tuple(locs),
                        dict(ev, ddp_forwards=fwd, dataloader_len=lens))]
    div = first_divergence(record, states)
    if div is not None and div.kind == "exited":
        return [_from_div(record, "hang.early-exit", div, states, ev, "rank(s) exited while others went on")]
    fewer = [s for s in done if any(s.ddp_fwd < c.ddp_fwd for c in cut)]
    if fewer:
        locs = [l for s in fewer if (l := _slot_loc(record, s.rank, Slot(ABSENT), states, "exited"))]
        locs += [l for s in cut if (l := best_where(record, s, "went on"))]
        return [Finding("hang.early-exit", "error",
                        f"rank(s) {[s.rank for s in fewer]} finished after fewer DDP steps "
                        f"({', '.join(f'rank {s.rank}: {s.ddp_fwd}' for s in states.values())}) while the others went on",
                        HINTS["hang.early-exit"], tuple(sorted(states)), tuple(locs), ev)]
    return []


def _from_div(record: RunRecord, fid: str, div: Divergence, states: dict[int, RankState], ev: dict, what: str) -> Finding:
    locs = []
    for r in sorted(div.slots):
        role = "diverged" if r in div.diverged else "waiting"
        slot = div.slots[r]
        l = _slot_loc(record, r, slot, states, role)
        if l:
            locs.append(l)
    desc = ", ".join(f"rank {r}: {_slot_text(sl)}" for r, sl in sorted(div.slots.items()))
    msg = f"{what}: first divergence at collective #{div.seq} of group {div.group} ({desc}); " \
          f"diverged: rank(s) {list(div.diverged)}"
    ev = dict(ev, divergence={"group": div.group, "seq": div.seq, "diverged": list(div.diverged)})
    return Finding(fid, "error", msg, HINTS[fid], tuple(sorted(div.slots)), tuple(locs), ev)


def _slot_text(sl: Any) -> str:
    if sl.op == INTERNAL:
        return "a DDP all-reduce/broadcast"
    if sl.op == ABSENT:
        return "nothing (exited)"
    site = f" at {sl.site[0].rsplit('/', 1)[-1]}:{sl.site[1]}" if sl.site else ""
    return f"{describe_op(sl.op, sl.shapes)}{site}"


def _timeout_finding(states: dict[int, RankState], now: float, cfg: Config, ev: dict) -> Finding:
    waiting = [s for s in states.values() if s.state in ("waiting", "ddp-wait")]
    busy = [s for s in states.values() if s.state == "busy"]
    keys = {(s.pending or {}).get("seq") for s in waiting} if waiting else set()
    same = (not busy and len(waiting) == len(states) and len(keys) == 1
            and len({_op_key(s.pending or {}) for s in waiting}) == 1)
    locs = [Location(s.rank, s.where.file, s.where.line, s.where.func, "waiting") for s in waiting if s.where]
    locs += [Location(s.rank, s.where.file, s.where.line, s.where.func, "busy") for s in busy if s.where]
    if same:
        p = waiting[0].pending or {}
        return Finding("hang.transport-stall", "error",
                       f"all ranks inside the same {p.get('op')} (#{p.get('seq')}) for over {cfg.timeout:g} s",
                       HINTS["hang.transport-stall"], tuple(sorted(states)), tuple(locs), ev)
    parts = [f"rank {s.rank} waiting in {(s.pending or {}).get('op', 'DDP backward')} at {_at(s.where)}"
             for s in waiting]
    parts += [f"rank {s.rank} busy at {_at(s.where)}" for s in busy]
    return Finding("hang.timeout", "error", f"no progress for {cfg.timeout:g} s: " + "; ".join(parts),
                   HINTS["hang.timeout"], tuple(sorted(states)), tuple(locs), ev)
