"""The figures a report carries for ``ddpdoctor compare`` (JSON ``figures``). Pure.

``step_ms``: per rank, the typical steady-state step and its phases in milliseconds (the profile's
breakdown, ``steps.typical_step``: the parts add up to the step). ``memory``: per rank, the growth per step after warm-up of process RSS and CUDA allocated
bytes (memleak's Theil-Sen slopes) and the last value. Each appears only when the record has the data.
"""

from __future__ import annotations

from typing import Any

from ddpdoctor.analysis.profile import breakdown as profile
from ddpdoctor.analysis.series import growth
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord


def compute(record: RunRecord) -> dict[str, Any]:
    """The report's figures (step times, memory growth) from the record."""
    out: dict[str, Any] = {}
    if any(rec.timeline for rec in record.ranks.values()):
        med = profile.typical(record)
        if med:
            out["step_ms"] = {str(r): {k: round(v, 3) for k, v in m.items()} for r, m in sorted(med.items())}
    mem: dict[str, Any] = {}
    for r, rec in sorted(record.ranks.items()):
        steps = [e for e in rec.memory if e.get("kind") == schema.K_MEM]
        row: dict[str, Any] = {}
        for key, name in (("rss", "rss"), ("cuda_allocated", "cuda")):
            pts = [(float(e["step"]), float(e[key])) for e in steps if key in e and e.get("step") is not None]
            g = growth(pts)
            if g is not None:
                row[f"{name}_bytes_per_step"] = round(g["late_slope"], 1)
                row[f"{name}_last_bytes"] = int(g["last"])
                row["steps"] = int(g["last_step"])
        if row:
            mem[str(r)] = row
    if mem:
        out["memory"] = mem
    return out
