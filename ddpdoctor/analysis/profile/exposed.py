"""The gradient all-reduce that the backward does not hide. Pure.

DDP starts a bucket's all-reduce as soon as its gradients are ready, so most of it runs while the backward
still computes; what runs on after the last gradient is ready (DDP's timers: ``comm_ms`` less
``overlap_ms``, sampled on every iteration by the profile probe) adds to every step. A rank whose backward
compute is shorter than the slowest rank's also waits that difference in its all-reduce: that part is a
straggler's (profile.straggler), not communication, and is taken off here.
"""

from __future__ import annotations

from statistics import median

from ddpdoctor.analysis.findings import Finding
from ddpdoctor.analysis.ids import PROFILE_EXPOSED_COMM
from ddpdoctor.analysis.profile.steps import typical
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

SHARE = 0.25  # exposed all-reduce above this share of the typical step ...
MIN_MS = 1.0  # ... and above this many ms ...
MIN_BYTES = 2**20  # ... of gradients in two buckets or more, or at least this many bytes: one small message's
# time is latency (on a busy CPU host, scheduling: 8.5 ms for the 2 KiB of probes/healthy.py on gloo, 2 cores),
# which no DDP knob changes


def _size(n: float) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def exposed_by_rank(record: RunRecord) -> dict[int, float]:
    """Per rank, the ms of gradient all-reduce after its backward compute ended, less its wait for the
    slowest rank's backward compute."""
    timers = {}
    for r, rec in record.ranks.items():
        info: dict = next((e for e in reversed(rec.timeline) if e.get("kind") == schema.K_PROFILE_INFO), {})
        d = info.get("ddp") or {}
        if isinstance(d.get("comm_ms"), (int, float)) and isinstance(d.get("backward_ms"), (int, float)):
            timers[r] = d
    if len(timers) < 2:
        return {}
    slowest = max(float(d["backward_ms"]) for d in timers.values())
    return {
        r: max(0.0, float(d["comm_ms"]) - float(d.get("overlap_ms") or 0.0) - (slowest - float(d["backward_ms"])))
        for r, d in timers.items()
    }


def detect(record: RunRecord) -> list[Finding]:
    """profile.exposed-comm when the median rank's exposed all-reduce is a large share of its typical step."""
    exposed = exposed_by_rank(record)
    med = typical(record)
    ranks = sorted(r for r in exposed if r in med)
    if not ranks:
        return []
    ms = median(exposed[r] for r in ranks)
    step = median(med[r]["step"] for r in ranks)
    if not step or ms < MIN_MS or ms / step < SHARE:
        return []
    info: dict = next(
        (e for e in reversed(record.ranks[ranks[0]].timeline) if e.get("kind") == schema.K_PROFILE_INFO), {}
    )
    buckets = [int(b) for b in info.get("buckets") or []]
    cap = info.get("bucket_cap_mb")
    if len(buckets) < 2 and sum(buckets) < MIN_BYTES:
        return []
    layout = (
        f"{len(buckets)} bucket{'s' if len(buckets) != 1 else ''} ({', '.join(_size(b) for b in buckets[:6])}"
        f"{', ...' if len(buckets) > 6 else ''}; bucket_cap_mb {cap:g})"
        if buckets and isinstance(cap, (int, float))
        else "bucket layout not recorded"
    )
    over = [r for r in ranks if exposed[r] / med[r]["step"] >= SHARE]
    return [
        Finding(
            PROFILE_EXPOSED_COMM,
            "warning",
            f"the gradient all-reduce runs {ms:.1f} ms per step after the backward compute ended (DDP's timers, "
            f"every iteration; median rank): {100 * ms / step:.0f} % of the {step:.1f} ms step; {layout}",
            "Let the backward hide more of it: a bucket size that starts the first all-reduce earlier and sends "
            "fewer, larger messages (bucket_cap_mb), gradient_as_bucket_view=True, a compression hook (fp16, bf16 "
            "on NCCL; changes results), or more work per step (a larger batch, no_sync() over accumulation steps). "
            "`ddpdoctor tune SCRIPT` measures each against an A/A control.",
            tuple(ranks),
            (),
            {
                "exposed_ms": {str(r): round(exposed[r], 3) for r in ranks} if len(ranks) <= 64 else {},
                "median_exposed_ms": round(ms, 3),
                "step_ms": round(step, 3),
                "buckets": buckets,
                "bucket_cap_mb": cap,
            },
            culprits=tuple(over or ranks),
        )
    ]
