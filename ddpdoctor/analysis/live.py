"""The live verdict while a run goes on: is the current wait a certain deadlock, a timeout, or nothing
yet; and the one status line the monitor prints. Pure.

A wait is *certain* to be a deadlock when a rank has waited at least ``settle`` seconds in a collective
that its peers cannot match: a peer has exited, waits in a different collective (other sequence
position, op or shape), or has already issued a different collective at that position (DDP's
all-reduces count: they move the sequence counter). Otherwise a wait is *uncertain* and becomes a hang
only after ``timeout`` seconds. The proof is the one policy's (``judge.stranded``, ``judge.receive_cycle``)
over the live facts; this module words its answers.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, Location, ranks_phrase
from ddpdoctor.analysis.hang import judge, policy
from ddpdoctor.analysis.hang.facts import RankFacts, agreement_of
from ddpdoctor.analysis.ids import HANG_DIVERGENT_COLLECTIVE, HANG_EARLY_EXIT, HANG_P2P_DEADLOCK, HANG_TIMEOUT
from ddpdoctor.analysis.state import RankState, all_states, describe_op, ledger_entry_at
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

op_key = agreement_of  # what must agree for two ranks' pending calls to be one (facts.agreement)


def certain_deadlock(record: RunRecord, states: dict[int, RankState], cfg: Config, now: float) -> str | None:
    """A one-line reason when the current waits can never complete, else None: the one policy's answer
    (policy.py) over the live case, where it is a proof."""
    got = policy.judge(LiveCase(record, states, cfg, now))
    return got[0].message if got and got[0].evidence.get("live") == "certain" else None


class LiveCase(policy.Case):
    """The monitor's look at a running job as the policy's case: each rank's state from its heartbeat, its
    pending call (a wrapper's, or the flight recorder's) with its group and position, the ledger's calls at a
    position, the ranks that ended and how long each wait lasts. Its answers are the live verdict: a proof
    (``evidence["live"] == "certain"``: a peer exited, waits or issued something else at that position, or
    every rank waits to receive) or a wait past ``--timeout`` (``"timeout"``)."""

    source = "live"
    can = frozenset({policy.POSITIONS, policy.HISTORY, policy.ENDINGS, policy.NOW})

    def __init__(self, record: RunRecord, states: dict[int, RankState], cfg: Config, now: float) -> None:
        self.record, self.states, self.cfg, self.now = record, states, cfg, now

    @functools.cached_property
    def facts(self) -> Mapping[int, RankFacts]:  # type: ignore[override]
        """The per-rank facts of the live ledger, heartbeats and flight pendings, as a look at a running job
        sees them (``sources.ledger.Look``: a wait counted once it has lasted the settle time on a fresh
        heartbeat, a rank's counts once they held that long); each built when first read: the judge of a job
        asks 1,024 ranks every second."""
        from ddpdoctor.analysis.hang.sources.ledger import LazyFacts, Look

        return LazyFacts(self.states, Look(self.now, self.cfg.settle))

    @functools.cached_property
    def stranded(self) -> judge.Stranded | None:
        """The policy's proof over the live facts (``judge.stranded``): the first wait some peer proves can
        never complete; a peer's ended wait counts once the waiting rank was seen still waiting a settle time
        later. The exited and differ rules both read it."""
        from ddpdoctor.analysis.hang.sources.ledger import call_at

        ranks = self.record.ranks
        return judge.stranded(self.facts, lambda q, c: call_at(ranks[q], c), self.cfg.settle)

    def exited(self) -> Finding | None:
        got = self.stranded
        if got is None or got.how != judge.EXITED:
            return None
        return _said(
            HANG_EARLY_EXIT, "certain", f"{waits_text(self.states[got.rank], self.now)}; rank {got.peer} has exited"
        )

    def differ(self) -> Finding | None:
        got = self.stranded
        if got is None or got.how == judge.EXITED:
            return None
        return _said(HANG_DIVERGENT_COLLECTIVE, "certain", _proof_text(self.record, self.states, got, self.now))

    def receive_cycle(self) -> Finding | None:
        ranks = judge.receive_cycle(self.facts)
        if ranks is None:
            return None
        text = "; ".join(
            waits_text(s, self.now)
            + (f" from rank {peer}" if (peer := (s.pending or {}).get("peer")) is not None else "")
            for s in (self.states[r] for r in ranks[:4])
        )
        return _said(HANG_P2P_DEADLOCK, "certain", f"{text}; every rank waits to receive and none sends")

    def overdue(self) -> Finding | None:
        reason = _overdue(self.record, self.states, self.cfg, self.now)
        return _said(HANG_TIMEOUT, "timeout", reason) if reason else None


def _said(fid: str, mode: str, reason: str) -> Finding:
    return Finding(fid, "error", reason, "", (), (), {"live": mode})


def _proof_text(record: RunRecord, states: dict[int, RankState], got: judge.Stranded, now: float) -> str:
    """The monitor's words for a peer's proof other than an exit: what the rank waits in (and where: its
    position, unless it is blocked at a sync point), and what the peer waits in or issued there."""
    a, b = states[got.rank], states[got.peer]
    mine, theirs = a.pending or {}, b.pending or {}
    what = waits_text(a, now)
    if got.how == judge.ELSEWHERE:
        return f"{what} on group {mine.get('group')}; rank {got.peer} waits on group {theirs.get('group')}"
    pos = "" if a.blocked is not None else f" (#{mine.get('seq')})"
    if got.how == judge.WAITS:
        other = describe_op(theirs.get("op"), theirs.get("shapes"))
        return f"{what}{pos}; rank {got.peer} waits in {other} (#{theirs.get('seq')})"
    c = got.call  # the peer's Python call at the waiting rank's position, in its ledger's words
    e = ledger_entry_at(record.ranks[got.peer], c.group, c.seq) if c and c.group is not None and c.seq else None
    other = describe_op(e.get("op"), e.get("shapes")) if e else "a DDP all-reduce"
    return f"{what}{pos}; rank {got.peer} issued {other} at that position"


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


def anyone_waiting(record: RunRecord, cfg: Config, now: float, states: dict[int, RankState] | None = None) -> bool:
    """Has some rank sat in a collective (or DDP backward) long enough that a verdict may be near?
    ``states``: ``all_states(record, now, cfg)`` when the caller has it already (the judge of a job)."""
    for s in (states if states is not None else all_states(record, now, cfg)).values():
        if s.state == "waiting" and s.since and now - s.since >= cfg.settle / 2:
            return True
        if s.state == "ddp-wait" and s.seq_stable_for >= cfg.settle / 2:
            return True
        if s.ended:
            return True
        if s.state == "busy" and s.stalled_for >= cfg.timeout / 2:
            return True  # the no-progress rule needs the ledgers (is an async Work outstanding?)
    return False


def verdict_near(record: RunRecord, cfg: Config, now: float) -> bool:
    """Could :func:`live_verdict` give a verdict within a few seconds? Every path to one starts with a rank
    that waits in a collective (the deadlock proof's waiting ranks, and the timeout of a wait), one that
    ended (an exited peer, every rank of a node done), or one without progress for ``timeout`` (in DDP's
    forward or backward, or busy): this is True when some rank is half way there. A node's ddpdoctor says
    so in its value, and the judge of a job rebuilds and judges the job's ranks every second only then."""
    for s in all_states(record, now, cfg).values():
        if s.ended or (s.state == "waiting" and s.since and now - s.since >= cfg.settle / 2):
            return True
        if s.state == "ddp-wait" and s.seq_stable_for >= cfg.timeout / 2:
            return True
        if s.state == "busy" and s.stalled_for >= cfg.timeout / 2:
            return True
    return False


def live_verdict(
    record: RunRecord, cfg: Config, now: float, states: dict[int, RankState] | None = None
) -> tuple[str, str] | None:
    """("certain", reason) or ("timeout", reason) when the monitor should stop the run: the one policy's
    answer over the live case. ``states``: ``all_states(record, now, cfg)`` when the caller has it already."""
    states = states if states is not None else all_states(record, now, cfg)
    got = policy.judge(LiveCase(record, states, cfg, now))
    return (str(got[0].evidence["live"]), got[0].message) if got else None


def _overdue(record: RunRecord, states: dict[int, RankState], cfg: Config, now: float) -> str | None:
    """A wait past ``--timeout``: this node's ranks all ended while torchrun waits for others, no rank made
    progress, or one rank waited that long."""
    world = record.world_size or 0
    if states and world > len(states) and all(s.ended for s in states.values()):
        # this node's ranks are done but torchrun waits (its exit barrier) for ranks it cannot see
        last = max((s.ended_t or 0.0) for s in states.values())
        if last and now - last >= cfg.timeout:
            unseen = [r for r in range(world) if r not in states]
            return (
                f"every rank on this node ended {now - last:.0f} s ago; torchrun still waits for "
                f"{ranks_phrase(unseen)} on other nodes"
            )
    live = [s for s in states.values() if not s.ended and s.state != "not-started"]
    if live and all(s.state == "busy" and not s.stale and s.stalled_for >= cfg.timeout for s in live):
        # nobody is inside a collective, yet nobody moves (no step, no collective issued or completed, no
        # CPU time): blocked at a sync point (Work.wait(), .item()) or stuck; never a silent hang
        return (
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
            return f"rank {s.rank} waited {waited:.0f} s (--timeout {cfg.timeout:g})"
    return None


def crash_verdict(record: RunRecord, states: dict[int, RankState]) -> str | None:
    """A job across nodes: a rank raised (an exception of its own, not a transport error: that is a victim's)
    while other ranks still run. Its node's torchrun ends its own ranks at once; the other nodes' ranks would
    wait in their next collective until gloo or NCCL gives up (or the timeout), so the judge ends the job now.
    The exception is in the job's view already (record/nodeview.py carries it in one line)."""
    from ddpdoctor.analysis.state import is_transport_error

    raised = [
        (float((record.ranks[r].error or {}).get("t") or s.ended_t or 0.0), r)
        for r, s in states.items()
        if s.state == "crashed" and record.ranks[r].error and not is_transport_error(record.ranks[r].error)
    ]
    running = [s for s in states.values() if not s.ended]
    if not raised or not running:
        return None
    r = min(raised)[1]
    err = record.ranks[r].error or {}
    frame = err.get("user_frame")  # [file, line, function]
    at = (
        f" at {str(frame[0]).rsplit('/', 1)[-1]}:{frame[1]}"
        if isinstance(frame, (list, tuple)) and len(frame) >= 2
        else ""
    )
    message = str(err.get("message", "")).splitlines()[0][:160] if err.get("message") else ""
    return (
        f"rank {r} raised {err.get('type', 'an exception')}: {message}{at}; "
        f"{ranks_phrase([s.rank for s in running])} still running"
    )


def status_line(record: RunRecord, cfg: Config, now: float, states: dict[int, RankState] | None = None) -> str | None:
    """The live line shown while some rank waits: who waits where, who is busy where. ``states``:
    ``all_states(record, now, cfg)`` when the caller has it already."""
    states = states if states is not None else all_states(record, now, cfg)
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


def restartable(mode: str, record: RunRecord) -> bool:
    """Will torchrun's agent restart the worker group by itself (``--max-restarts`` left)? It does when a
    worker fails: a rank raised, exited with a non-zero code or died of a fatal signal; a verdict that follows
    from such a rank (``crash``, or a peer proven stuck because that rank exited) is then the agent's to act
    on, and the monitor follows the next attempt. A deadlock among live ranks, or a rank that left early with
    exit code 0, is never restarted by torchrun: the monitor ends the job as it does without restarts."""
    if mode == "crash":
        return True
    for rec in record.ranks.values():
        fin = rec.event(schema.K_FINISH)
        if rec.error or rec.fatal.strip() or (fin and (fin.get("exception") or fin.get("code") not in (0, None))):
            return True
    return False
