"""What each file of ``ranks/<r>/`` feeds in a :class:`~ddpdoctor.record.reader.RankRecord`, as a table:
:data:`STREAMS` (JSON-lines files, read incrementally) and :data:`WHOLE` (files read whole). Stdlib only."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from . import schema

APPEND, LATEST, FOLD, ONCE = "append", "latest", "fold", "once"


@dataclass(frozen=True)
class Stream:
    """A JSON-lines file of ``ranks/<r>/`` and the :class:`RankRecord` field its new lines feed: APPEND
    (every line), LATEST (the newest line) or FOLD (through the reader's folder for that field)."""

    name: str
    field: str
    how: str
    ring: bool = False  # rotated by a RingWriter (``<name>.prev.jsonl``)
    poll: bool = True  # read by the monitor's cheap poll (``refresh(full=False)``) too


@dataclass(frozen=True)
class Whole:
    """A file of ``ranks/<r>/`` read whole: LATEST (again at every refresh) or ONCE (until it is there);
    a JSON object (anything else reads as empty) or text (its first 64 KiB)."""

    name: str
    field: str
    how: str
    text: bool = False
    poll: bool = True


# in the order they are read
STREAMS = (
    Stream(schema.EVENTS, "events", APPEND),
    Stream(schema.HEARTBEAT, "last_hb", FOLD, ring=True),
    Stream(schema.LEDGER, "ledger", FOLD, ring=True, poll=False),
    Stream(schema.CHECKS, "checks", APPEND, poll=False),
    Stream(schema.FINGERPRINTS, "fingerprints", APPEND, poll=False),
    Stream(schema.MEMORY, "memory", APPEND, poll=False),
    Stream(schema.TIMELINE, "timeline", APPEND, poll=False),
    Stream(schema.STACKS, "stacks", LATEST),
)
WHOLE = (
    Whole(schema.COUNTERS, "counters", LATEST),
    Whole(schema.TERMINATED, "terminated", ONCE, text=True, poll=False),
    Whole(schema.FATAL, "fatal", ONCE, text=True),
    Whole(schema.ERROR, "error", ONCE),
)


def read_whole(w: Whole, path: str) -> tuple[bool, Any]:
    """``(True, value)`` for the field of ``w`` from its file; ``(False, None)``: unreadable, leave it."""
    try:
        with open(path, encoding="utf-8", errors="replace" if w.text else "strict") as f:
            if w.text:
                return True, f.read(65536)
            obj = json.load(f)
    except (OSError, ValueError):
        return False, None
    return True, obj if isinstance(obj, dict) else ({} if w.how == LATEST else None)


# a rank blocked in C++ (a collective, Work.wait(), a sync point) burns almost no CPU; one that computes
# inside a single long line of the user's code does
_BUSY_CPU = 0.03  # CPU seconds per wall second that count as progress (16 ranks on 2 cores get 0.12)
# the shortest gap between two heartbeats whose CPU times tell a share: the rank writes its CPU time in whole ms,
# and the beat it writes when the monitor asks for its stacks may follow the last by well under one
_CPU_SPAN = 0.1


def progressed(prev: dict[str, Any], hb: dict[str, Any]) -> bool:
    """The rank moved between two heartbeats: a step, a collective, a new line, or CPU time. A call waited on
    that first shows (``pending`` or ``awaiting`` from none) is not a move: the rank was already there, and
    the recorder names the call only once it has been in flight a while (rank/flight.py PENDING_AFTER); read
    as a move, the wait would look that much younger than it is."""
    if any(prev.get(k) != hb.get(k) for k in ("seq", "step", "ncoll", "where")):
        return True
    if any(prev.get(k) is not None and prev.get(k) != hb.get(k) for k in ("pending", "awaiting")):
        return True
    dt = float(hb.get("t") or 0) - float(prev.get("t") or 0)
    cpu0, cpu1 = prev.get("cpu"), hb.get("cpu")
    if cpu0 is None or cpu1 is None:
        return False
    return dt >= _CPU_SPAN and (float(cpu1) - float(cpu0)) / dt > _BUSY_CPU
