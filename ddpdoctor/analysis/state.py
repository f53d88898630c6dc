"""Per-rank state derived from a run record at a moment ``now``. Pure."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from dataclasses import dataclass
from typing import Any

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Location
from ddpdoctor.record import paths as record_paths
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RankRecord, RunRecord

# Messages gloo gives a rank whose peer went away or sent something else: the rank is a victim.
TRANSPORT_PATTERNS = (
    re.compile(r"Connection closed by peer"),
    re.compile(r"Connection reset by peer"),
    re.compile(r"Broken pipe"),
    re.compile(r"Received data size doesn't match"),
    # gloo's enforce on a peer's message that does not fit this rank's call (another op or size at the same
    # position): it aborts the receiving rank, the victim of whichever rank's calls parted (tests/unit/analysis/test_state.py)
    re.compile(r"op\.preamble\.(?:roffset \+ op\.preamble\.)?length <= op\.(?:nbytes|buf->size_)"),
    re.compile(r"[Tt]imed out"),
    re.compile(r"Socket Timeout"),
    re.compile(r"NCCL communicator was aborted|NCCL error|ncclRemoteError"),
    re.compile(r"DistBackendError"),
)
SIZE_MISMATCH = re.compile(r"Received data size doesn't match|size mismatch|Mismatch between collective")
TEARDOWN_ABORT = "terminate called without an active exception"

P2P, SHAPED = schema.P2P, schema.SHAPED  # the collective vocabulary (record/schema.py)
RECVS = schema.RECVS  # point-to-point receives


def loc(rank: int, site: Any, role: str = "") -> Location | None:
    """A Location from a recorded site ``[file, line, func]``; None when ``site`` is not one."""
    if isinstance(site, (list, tuple)) and len(site) >= 2 and isinstance(site[1], int):
        return _location(rank, str(site[0]), site[1], str(site[2]) if len(site) > 2 else "", role)
    return None


@functools.lru_cache(maxsize=1 << 14)
def _location(rank: int, file: str, line: int, func: str, role: str) -> Location:
    # Location is frozen: the same one serves every look (the live judge of a job makes two per rank a second)
    return Location(rank=rank, file=file, line=line, func=func, role=role)


_FRAME = re.compile(r'File "([^"]+)", line (\d+),? in (\S+)')
_WHAT = re.compile(r"what\(\):\s*(.+)")


def is_user_path(path: str, record: RunRecord) -> bool:
    """The user's code: the script's folder, or anything outside installed packages and the stdlib."""
    script = str(record.manifest.get("script_path") or record.manifest.get("script") or "")  # -m: the module's file
    absolute = path.startswith(os.sep) and script.startswith(os.sep)
    return _is_user_path(path, script, "" if absolute else os.getcwd())


@functools.lru_cache(maxsize=4096)
def _is_user_path(path: str, script: str, _cwd: str) -> bool:
    # cached: the live judge of a job asks this for every rank's line on every look (1,024 ranks a second),
    # and a run has few distinct lines; the working directory is in the key where abspath reads it
    home = (os.path.dirname(os.path.abspath(script)) + os.sep,) if script else ()
    return record_paths.is_user_path(path, home, lib_markers=record_paths.LIB_MARKERS)


def user_frame_in(text: str, record: RunRecord) -> list | None:
    """The innermost user frame in a traceback or a faulthandler dump (which lists innermost first)."""
    frames = [[f, int(n), fn] for f, n, fn in _FRAME.findall(text)]
    if "most recent call first" in text:
        return fatal_frame(text, record)[0]
    user = [f for f in frames if is_user_path(f[0], record)]
    return user[-1] if user else None


def fatal_frame(text: str, record: RunRecord) -> tuple[list | None, str | None]:
    """From a faulthandler dump: the innermost user frame and the torch.distributed call it was in."""
    for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", text):
        frames = [[f, int(n), fn] for f, n, fn in _FRAME.findall(block)]
        for i, fr in enumerate(frames):
            if is_user_path(fr[0], record):
                op = next((g[2] for g in reversed(frames[:i]) if g[0].endswith("distributed_c10d.py")), None)
                return fr, op
    return None, None


def complete_errors(record: RunRecord) -> RunRecord:
    """A rank killed by a fatal signal (gloo aborts on a size mismatch) wrote no error.json: the record
    with one built from its stderr (``what(): ...``) and faulthandler's stacks. The input is not changed."""
    ranks = dict(record.ranks)
    for r, rec in record.ranks.items():
        if rec.error is not None or rec.event(schema.K_FINISH) is not None or not rec.fatal.strip():
            continue
        what = _WHAT.findall(rec.stderr_tail)
        head = rec.fatal.strip().splitlines()[0]
        frame, op = fatal_frame(rec.fatal, record)
        ranks[r] = dataclasses.replace(
            rec,
            error={
                "type": "FatalSignal",
                "message": what[-1].strip() if what else head,
                "user_frame": frame,
                "op": op,
                "frames": [],
                "fatal": head,
            },
        )
    return dataclasses.replace(record, ranks=ranks)


def is_transport_error(err: dict[str, Any] | None) -> bool:
    """The error is one a rank gets when a peer went away or sent something else: the rank is a victim."""
    if not err:
        return False
    text = f"{err.get('type', '')}: {err.get('message', '')}"
    return any(p.search(text) for p in TRANSPORT_PATTERNS)


@dataclass(frozen=True)
class RankState:
    """Where one rank stands at ``now``: its state, what it waits in, since when, at which line."""

    rank: int
    state: str  # not-started | busy | waiting | ddp-wait | finished | crashed | gone
    since: float | None = None  # waiting since
    pending: dict[str, Any] | None = None
    where: Location | None = None
    seq: dict[str, int] | None = None
    seq_stable_for: float = 0.0
    stalled_for: float = 0.0  # no step, collective, new line or CPU time for this long
    ddp_fwd: int = 0
    exit_code: Any = None
    stale: bool = False
    ended_t: float | None = None
    hb_t: float | None = None
    blocked: Location | None = None  # waiting at a sync point (not a collective call) for ``pending``

    @property
    def proof_waiting(self) -> bool:
        """Waiting in a collective (or at a sync point for one): the live deadlock proof may count it."""
        return self.state == "waiting"

    @property
    def ended(self) -> bool:
        """Finished, crashed or gone: it will issue nothing more."""
        return self.state in ("finished", "crashed", "gone")


def rank_state(rec: RankRecord, now: float, cfg: Config, record: RunRecord | None = None) -> RankState:
    """The state of one rank at ``now`` from its heartbeat, finish event, error and counters."""
    hb = rec.last_hb or {}
    fin = rec.event(schema.K_FINISH)
    where = loc(rec.rank, hb.get("where"), "")
    if where is not None and record is not None and not is_user_path(where.file, record):
        where = None  # an older rank side took `<frozen runpy>` (under the cwd) for the user's file
    if fin is None and rec.terminated and record is not None:
        # ended from outside: faulthandler's dump says where it was, fresher than the last heartbeat
        where = loc(rec.rank, fatal_frame(rec.terminated, record)[0], "") or where
    seq = hb.get("seq") or (fin or {}).get("seq") or {}
    ddp_fwd = max(int(hb.get("step") or 0), int((fin or {}).get("ddp_fwd") or 0), int(rec.counters.get("ddp_fwd") or 0))
    stable = now - rec.seq_changed_t if rec.seq_changed_t else 0.0
    if fin is not None:
        state = "crashed" if fin.get("exception") or rec.error else "finished"
        return RankState(
            rec.rank,
            state,
            where=where,
            seq=seq,
            ddp_fwd=ddp_fwd,
            exit_code=fin.get("code"),
            seq_stable_for=stable,
            ended_t=fin.get("t"),
        )
    if rec.error is not None:
        return RankState(rec.rank, "crashed", where=where, seq=seq, ddp_fwd=ddp_fwd, exit_code=1)
    if not hb:
        return RankState(rec.rank, "not-started")
    stale = now - float(hb.get("t", now)) > cfg.stale
    pending = hb.get("pending")
    if pending:
        return RankState(
            rec.rank,
            "waiting",
            since=pending.get("since"),
            pending=pending,
            where=loc(rec.rank, pending.get("site"), "waiting") or where,
            seq=seq,
            seq_stable_for=stable,
            ddp_fwd=ddp_fwd,
            stale=stale,
            hb_t=hb.get("t"),
        )
    if hb.get("in_backward") or hb.get("in_ddp_forward"):
        since = rec.seq_changed_t
        return RankState(
            rec.rank, "ddp-wait", since=since, where=where, seq=seq, seq_stable_for=stable, ddp_fwd=ddp_fwd, stale=stale
        )
    stalled = now - rec.progress_t if rec.progress_t else 0.0
    awaiting = hb.get("awaiting")
    if awaiting and stalled >= cfg.settle and awaiting.get("seq") is not None:
        # the main thread stopped moving while an asynchronous collective it issued is incomplete: it is
        # blocked at a sync point (Work.wait(), .item(), synchronize) waiting for that collective
        return RankState(
            rec.rank,
            "waiting",
            since=rec.progress_t,
            pending=awaiting,
            where=loc(rec.rank, awaiting.get("site"), "waiting") or where,
            seq=seq,
            seq_stable_for=stable,
            ddp_fwd=ddp_fwd,
            stale=stale,
            hb_t=hb.get("t"),
            blocked=dataclasses.replace(where, role="blocked") if where else None,
        )
    return RankState(
        rec.rank, "busy", where=where, seq=seq, seq_stable_for=stable, ddp_fwd=ddp_fwd, stale=stale, stalled_for=stalled
    )


def hb_steps(hb: dict[str, Any]) -> int:
    """The training steps a heartbeat (or finish event) counts (``rank/steps.py``: one notion of a step for
    every job shape); a record of an older ddpdoctor has none: its DDP forwards."""
    if "steps" in hb:
        return int(hb.get("steps") or 0)
    return int(hb.get("step") or hb.get("ddp_fwd") or 0)


def steps_of(rec: RankRecord) -> int:
    """A rank's training steps so far, from its last heartbeat and its finish event (``hb_steps``); a rank
    of an older ddpdoctor: its DDP forwards, the counters file's too."""
    hb, fin = rec.last_hb or {}, rec.event(schema.K_FINISH) or {}
    if "steps" in hb or "steps" in fin:
        return max(hb_steps(hb) if "steps" in hb else 0, hb_steps(fin) if "steps" in fin else 0)
    return max(hb_steps(hb), hb_steps(fin), int(rec.counters.get("ddp_fwd") or 0))


def all_states(record: RunRecord, now: float, cfg: Config) -> dict[int, RankState]:
    """Every rank's state at ``now``."""
    return {r: rank_state(rec, now, cfg, record) for r, rec in record.ranks.items()}


def ledger_entry_at(rec: RankRecord, group: str, seq: int) -> dict[str, Any] | None:
    """The Python-level collective of ``rec`` that covers sequence number ``seq`` of ``group``."""
    for e in reversed(rec.ledger):
        rng = e.get("seq")
        if e.get("group") == group and rng and rng[0] <= seq <= rng[1]:
            return e
        if e.get("group") == group and rng and rng[1] < seq:
            return None
    return None


def describe_op(op: str | None, shapes: Any = None) -> str:
    """``all_reduce(4x4)``: an op with the shapes of its first tensors (shaped collectives only)."""
    if not op:
        return "?"
    if op in SHAPED and shapes:
        return f"{op}({', '.join('x'.join(map(str, s)) or 'scalar' for s in shapes[:2])})"
    return op
