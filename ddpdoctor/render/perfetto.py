"""Chrome trace-event JSON (opens in ui.perfetto.dev and chrome://tracing): one process per rank, one
track per thread. Times are CLOCK_MONOTONIC (perf_counter_ns), comparable across ranks of one host. Pure."""

from __future__ import annotations

import json
from typing import Any

from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord


def trace(record: RunRecord) -> dict[str, Any]:
    ranges = [(r, e) for r, rec in record.ranks.items() for e in rec.timeline if e.get("kind") == schema.K_RANGE]
    base = min((e["t0"] for _r, e in ranges), default=0)
    events: list[dict[str, Any]] = []
    for r, rec in sorted(record.ranks.items()):
        events.append({"name": "process_name", "ph": "M", "pid": r, "tid": 0, "args": {"name": f"rank {r}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": r, "tid": 0, "args": {"sort_index": r}})
        info = next((e for e in rec.timeline if e.get("kind") == schema.K_PROFILE_INFO), {})
        tids = {e["tid"] for e in rec.timeline if e.get("kind") == schema.K_RANGE}
        for tid in sorted(tids):
            name = "main" if tid == info.get("main_tid") else f"thread {tid}"
            events.append({"name": "thread_name", "ph": "M", "pid": r, "tid": tid, "args": {"name": name}})
    for r, e in ranges:
        ev = {
            "name": e["name"] if e.get("payload") is None or e["name"] != "step" else f"step {e['payload']}",
            "cat": e.get("cat") or "step",
            "ph": "X",
            "pid": r,
            "tid": e["tid"],
            "ts": (e["t0"] - base) / 1000.0,
            "dur": max(0.0, (e["t1"] - e["t0"]) / 1000.0),
        }
        events.append(ev)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"tool": "ddpdoctor"}}


def render(record: RunRecord) -> str:
    return json.dumps(trace(record), separators=(",", ":")) + "\n"
