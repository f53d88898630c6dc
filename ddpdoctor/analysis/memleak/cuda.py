"""GPU memory that grows, told apart by layer (pure): the caching allocator's *allocated* bytes (tensors the
program keeps: a leak), its *reserved* bytes while allocated stays flat (blocks the cache holds and cannot
reuse: fragmentation, not a leak), and the process's memory as NVML sees it while reserved stays flat
(memory outside the allocator: NCCL's buffers, cuBLAS/cuDNN workspaces, other CUDA libraries).

Each finding names the growing ranks, the rank's ``torch.cuda.memory_summary()`` in the run directory and,
with ``--snapshot``, the allocator history to open at https://pytorch.org/memory_viz.
"""

from __future__ import annotations

import os
from statistics import median
from typing import Any

from ddpdoctor.analysis.findings import Finding
from ddpdoctor.analysis.ids import MEMLEAK_CUDA, MEMLEAK_CUDA_OUTSIDE_ALLOCATOR, MEMLEAK_CUDA_RESERVED
from ddpdoctor.analysis.memleak import evidence as mev
from ddpdoctor.analysis.series import growth
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

MIN_SLOPE = 64 * 1024.0  # bytes per step
MIN_TOTAL = 8 * 2**20  # over the later half of the run
FLAT = 0.1  # another layer is flat when it grows less than this share of the growing one


def _series(steps: list[dict[str, Any]], key: str) -> list[tuple[float, float]]:
    return [(s["step"], float(s[key])) for s in steps if key in s]


def _grows(steps: dict[int, list], ranks: list[int], key: str) -> dict[int, dict[str, float]]:
    out = {}
    for r in ranks:
        gr = growth(_series(steps.get(r, []), key))
        if gr is not None and mev.leaking(gr, MIN_SLOPE, MIN_TOTAL):
            out[r] = gr
    return out


def _slope(steps: list[dict[str, Any]], key: str) -> float:
    gr = growth(_series(steps, key))
    return gr["late_slope"] if gr else 0.0


def _files(record: RunRecord, rank: int) -> dict[str, str]:
    """The growing rank's memory_summary (the latest census's, else the last) and --snapshot dumps."""
    out: dict[str, str] = {}
    base = record.rank_dir(rank)  # the attempt's ranks/ after an elastic restart
    for which in ("census", "last", "first"):
        path = os.path.join(base, schema.CUDA_SUMMARY.format(which))
        if os.path.isfile(path):
            out["memory_summary"] = path
            break
    snaps = [e for e in record.ranks[rank].memory if e.get("kind") == schema.K_CUDA_SNAPSHOT and e.get("path")]
    for e in snaps:
        out[f"snapshot_{e.get('which')}"] = str(e["path"])
    return out


def _where(files: dict[str, str], rank: int) -> str:
    parts = []
    if "memory_summary" in files:
        parts.append(f"rank {rank}'s torch.cuda.memory_summary(): {files['memory_summary']}")
    snap = files.get("snapshot_growth") or files.get("snapshot_last")
    if snap:
        parts.append(f"allocator history (open at https://pytorch.org/memory_viz): {snap}")
    return ("; " + "; ".join(parts)) if parts else ""


def detect(
    record: RunRecord, steps: dict[int, list], census: dict[int, list], ranks: list[int], seen: set[str]
) -> list[Finding]:
    """The CUDA findings. ``seen``: ids already found (a graph or tensor leak explains allocated growth)."""
    if not any("cuda_allocated" in s for r in ranks for s in steps.get(r, [])):
        return []
    out: list[Finding] = []
    allocated = _grows(steps, ranks, "cuda_allocated")
    if allocated and not seen:
        hr, unknown = mev.rank_set(allocated, {r: [_series(steps[r], "cuda_allocated")] for r in ranks}, ranks)
        per = median(x["late_slope"] for x in allocated.values())
        reserved = median(_slope(steps[r], "cuda_reserved") for r in allocated)
        files = _files(record, hr[0])
        out.append(
            Finding(
                MEMLEAK_CUDA,
                "error",
                f"CUDA allocated memory grows by {mev.mb(per)} per step {mev.who(hr, ranks, unknown)} (reserved "
                f"{'+' + mev.mb(reserved) if reserved > 0 else 'flat'} per step): tensors kept on the GPU, a leak, "
                "not fragmentation"
                + mev.project(steps[hr[0]], census.get(hr[0], []), per, "cuda")
                + _where(files, hr[0]),
                "Find what keeps GPU tensors from step to step (a list of outputs, a cache, a metric that "
                "stores tensors): the memory_summary's 'Allocated memory' row rises; `--snapshot` shows each "
                "allocation's stack.",
                tuple(hr),
                (),
                {"per_step": per, "reserved_per_step": reserved, **files},
                culprits=tuple(hr),
            )
        )
        return out
    reserved_hits = _grows(steps, ranks, "cuda_reserved")
    flat_alloc = {r: x for r, x in reserved_hits.items() if _slope(steps[r], "cuda_allocated") < FLAT * x["late_slope"]}
    if flat_alloc:
        hr, unknown = mev.rank_set(flat_alloc, {r: [_series(steps[r], "cuda_reserved")] for r in ranks}, ranks)
        per = median(x["late_slope"] for x in flat_alloc.values())
        files = _files(record, hr[0])
        out.append(
            Finding(
                MEMLEAK_CUDA_RESERVED,
                "warning",
                f"the CUDA caching allocator's reserved memory grows by {mev.mb(per)} per step "
                f"{mev.who(hr, ranks, unknown)} while allocated memory stays flat: blocks the cache holds and "
                "cannot reuse (fragmentation from changing tensor sizes), not a leak of tensors" + _where(files, hr[0]),
                "Set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (segments that grow in place); keep "
                "shapes steady (pad variable-length batches to a few sizes); the memory_summary's 'Non-releasable "
                "memory' row shows the fragmentation.",
                tuple(hr),
                (),
                {"per_step": per, **files},
                culprits=tuple(hr),
            )
        )
    process_hits = _grows(steps, ranks, "nvml_process")
    outside = {r: x for r, x in process_hits.items() if _slope(steps[r], "cuda_reserved") < FLAT * x["late_slope"]}
    if outside:
        hr, unknown = mev.rank_set(outside, {r: [_series(steps[r], "nvml_process")] for r in ranks}, ranks)
        per = median(x["late_slope"] for x in outside.values())
        out.append(
            Finding(
                MEMLEAK_CUDA_OUTSIDE_ALLOCATOR,
                "error",
                f"this process's GPU memory (NVML) grows by {mev.mb(per)} per step {mev.who(hr, ranks, unknown)} "
                "while the caching allocator's reserved memory stays flat: memory outside PyTorch's allocator "
                "(NCCL buffers and communicators, cuBLAS/cuDNN workspaces, CUDA graphs, another CUDA library)",
                "Look for communicators or process groups created per step (`dist.new_group` in the loop), "
                "CUDA graphs captured repeatedly, or a library allocating with cudaMalloc; "
                "`NCCL_DEBUG=INFO` shows NCCL's allocations.",
                tuple(hr),
                (),
                {"per_step": per},
                culprits=tuple(hr),
            )
        )
    return out
