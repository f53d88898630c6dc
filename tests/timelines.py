"""Hand-built profile timelines (``timeline.jsonl`` records) for the unit tests of the profile analysis,
the figures and the trace renderers: steps of fixed phase lengths in ms, line samples, profile_info."""

from __future__ import annotations

from typing import Any

MS = 1_000_000  # ns

PHASE_RANGES = (("data", "dataloader wait", "data"), ("forward", "forward", "compute"),
                ("backward", "backward", "compute"), ("optimizer", "optimizer step", "compute"))  # fmt: skip


def steps(
    n: int = 10,
    data: float = 2.0,
    forward: float = 10.0,
    backward: float = 20.0,
    optimizer: float = 5.0,
    other: float = 3.0,
    collective: float = 0.0,
    rank: int = 0,
    tid: int = 1,
) -> list[dict[str, Any]]:
    """``n`` steps, each ``data`` + ``forward`` + ``backward`` + ``optimizer`` + a Python ``collective``
    (an all_reduce outside the phases) + ``other`` ms, back to back from t=0."""
    lengths = {"data": data, "forward": forward, "backward": backward, "optimizer": optimizer}
    out: list[dict[str, Any]] = []
    t = 0
    for i in range(n):
        t0 = t
        for key, name, cat in PHASE_RANGES:
            d = int(lengths[key] * MS)
            if d:
                out.append(_range(rank, name, cat, tid, t, t + d, step=i))
            t += d
        if collective:
            d = int(collective * MS)
            out.append(_range(rank, "all_reduce", "comm", tid, t, t + d, step=i))
            t += d
        t += int(other * MS)
        out.append(_range(rank, "step", "step", tid, t0, t, step=i))
    return out


def _range(rank: int, name: str, cat: str, tid: int, t0: int, t1: int, **kw: Any) -> dict[str, Any]:
    return {"v": 1, "kind": "range", "rank": rank, "t": t1 / 1e9, "name": name, "cat": cat, "tid": tid,
            "t0": t0, "t1": t1, **kw}  # fmt: skip


def samples(rows: list[tuple[str, str, int, str, int, str]], rank: int = 0) -> dict[str, Any]:
    """One ``samples`` record: rows of (phase, file, line, func, count, source text)."""
    return {"v": 1, "kind": "samples", "rank": rank, "t": 1.0,
            "rows": [[ph, f, l, fn, None, None, n, text] for ph, f, l, fn, n, text in rows]}  # fmt: skip


def info(rank: int = 0, **kw: Any) -> dict[str, Any]:
    """A ``profile_info`` record (steps, forwards, buckets, amp, ddp timers ...)."""
    return {"v": 1, "kind": "profile_info", "rank": rank, "t": 1.0, **kw}


def with_fsdp_comm(tl: list[dict[str, Any]], **ms: float) -> list[dict[str, Any]]:
    """``tl`` with an FSDP collective range at the start of each forward and backward, as the profile probe
    records them (rank/probes/profile/timeline.py): ``all_gather`` ms in forward ("fsdp all-gather"),
    ``reduce_scatter`` and ``all_reduce`` ms in backward."""
    out = list(tl)
    where = {"all_gather": "forward", "reduce_scatter": "backward", "all_reduce": "backward"}
    for e in tl:
        for key, d in ms.items():
            if e.get("name") == where[key] and d:
                t0 = e["t0"]
                out.append(_range(e["rank"], "fsdp " + key.replace("_", "-"), "comm", e["tid"], t0, t0 + int(d * MS)))
    return out
