"""What ddpdoctor itself cost the run (issue 37): the report's cost line and its JSON. Pure.

Each rank writes its account (``rank/cost.py``) into every heartbeat and its finish event: the training
thread's cost (thread CPU time of ddpdoctor's wrappers and hooks, sampled, plus the scans and censuses,
exact), and the heartbeat thread's CPU time. The monitor writes its own CPU time when the job ends. Per
step: over the rank's training steps (``rank/steps.py``: optimizer steps, or what stands for them); the
step's time is the rank's wall time from its first DDP forward (else its first step's end, else its
``init_process_group``) to its last record, over the steps after the first.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from ddpdoctor.analysis.state import hb_steps
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord


def _rank_cost(rec: Any) -> dict[str, Any] | None:
    """One rank's figures per step, from its finish event (else its last heartbeat)."""
    fin = rec.event(schema.K_FINISH)
    src = fin if fin and isinstance(fin.get("cost"), dict) else rec.last_hb
    if not src or not isinstance(src.get("cost"), dict):
        return None
    c = src["cost"]
    steps = hb_steps(src)  # training steps (rank/steps.py); an older record's DDP forwards
    # the loop's time: from the first DDP forward (else the init) to this record, over the steps after the first
    init = rec.event(schema.K_INIT) or rec.event(schema.K_START)
    t0 = c.get("t_first_step") or (init.get("t") if init else None)
    wall = float(src.get("t", 0.0)) - float(t0) if t0 is not None else 0.0
    out: dict[str, Any] = {
        "steps": steps,
        "train_us": float(c.get("train_us") or 0),
        "background_us": float(c.get("bg_us") or 0),
        "exact_us": float(c.get("exact_us") or 0),
        "calls": int(c.get("calls") or 0),
        "timed": int(c.get("timed") or 0),
        "gc_skipped": int(c.get("gc_skipped") or 0),  # timed calls a collection ran in, left out (rank/cost.py)
    }
    if steps > 0:
        out["train_us_per_step"] = out["train_us"] / steps
        out["background_us_per_step"] = out["background_us"] / steps
        if wall > 0:
            step_us = wall * 1e6 / (max(1, steps - 1) if c.get("t_first_step") else steps)
            out["step_ms"] = step_us / 1e3
            out["train_pct"] = 100 * out["train_us_per_step"] / step_us
            out["background_pct"] = 100 * out["background_us_per_step"] / step_us
    return out


def compute(record: RunRecord) -> dict[str, Any]:
    """The run's cost: per rank, and the median rank's figures; the monitor's CPU time per step. Empty when
    no rank recorded its account (a run of an older ddpdoctor, a rank that never started)."""
    ranks = {r: c for r, rec in sorted(record.ranks.items()) if (c := _rank_cost(rec)) is not None}
    if not ranks:
        return {}
    out: dict[str, Any] = {"ranks": {str(r): c for r, c in ranks.items()}}
    for key in ("train_us_per_step", "train_pct", "background_us_per_step", "background_pct", "step_ms"):
        vals = [c[key] for c in ranks.values() if key in c]
        if vals:
            out[key] = median(vals)
    steps = max(c["steps"] for c in ranks.values())
    out["steps"] = steps
    ex = record.monitor_event(schema.K_EXIT)
    if ex and ex.get("cpu_s") is not None:
        out["monitor_cpu_s"] = float(ex["cpu_s"])
        # per step: its CPU time since the ranks' loop began (a record of an older ddpdoctor: all of it)
        loop = ex.get("cpu_loop_s")
        if loop is not None:
            out["monitor_loop_cpu_s"] = float(loop)
        if steps > 0:
            out["monitor_us_per_step"] = float(ex["cpu_s"] if loop is None else loop) * 1e6 / steps
            if out.get("step_ms"):
                out["monitor_pct"] = 100 * out["monitor_us_per_step"] / (out["step_ms"] * 1e3)
    return out


def _us(x: float) -> str:
    return f"{x:.1f}" if x < 100 else f"{x:.0f}"


def line(cost: dict[str, Any]) -> str:
    """The report's line: "ddpdoctor's cost: 3.1 µs/step on the training thread (0.18 % of a 1.70 ms step),
    background 12 µs/step (0.7 %), monitor 25 µs/step (1.5 %)"."""
    if not cost:
        return "ddpdoctor's cost: not measured (no rank recorded its account)"
    if "train_us_per_step" not in cost:
        train = max((c["train_us"] for c in cost["ranks"].values()), default=0.0)
        bg = max((c["background_us"] for c in cost["ranks"].values()), default=0.0)
        return f"ddpdoctor's cost: {train / 1e3:.1f} ms on the training thread, background {bg / 1e3:.1f} ms (no steps)"
    out = f"ddpdoctor's cost: {_us(cost['train_us_per_step'])} µs/step on the training thread"
    if "train_pct" in cost:
        out += f" ({cost['train_pct']:.2f} % of a {cost['step_ms']:.2f} ms step)"
    out += f", background {_us(cost['background_us_per_step'])} µs/step"
    if "background_pct" in cost:
        out += f" ({cost['background_pct']:.1f} %)"
    if "monitor_us_per_step" in cost:
        out += f", monitor {_us(cost['monitor_us_per_step'])} µs/step"
        if "monitor_pct" in cost:
            out += f" ({cost['monitor_pct']:.1f} %)"
    return out
