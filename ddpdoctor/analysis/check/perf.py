"""Performance mistakes visible from the records. Pure."""

from __future__ import annotations

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding
from ddpdoctor.analysis.ids import PERF_GRAD_ACCUM_NO_SYNC
from ddpdoctor.analysis.state import loc
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord


def detect(record: RunRecord, cfg: Config) -> list[Finding]:
    """Gradient accumulation that all-reduces at every micro-step (no ``no_sync()``)."""
    hits = {}
    for r, rec in record.ranks.items():
        steps = [e for e in rec.checks if e.get("kind") == schema.K_OPTSTEP]
        if len(steps) < 2:
            continue
        synced = sorted(e.get("micro", e.get("synced", 0)) for e in steps)
        median = synced[len(synced) // 2]
        if median > 1:
            hits[r] = (median, steps)
    if not hits:
        return []
    ranks = tuple(sorted(hits))
    micro, steps = hits[ranks[0]]
    models = set(next((e.get("models") for e in steps if e.get("micro", 0) > 1 and e.get("models")), None) or [0])
    nbytes = sum(
        int(e.get("param_bytes") or 0)
        for e in record.ranks[ranks[0]].checks
        if e.get("kind") == schema.K_DDP and int(e.get("model", 0)) in models
    )
    wasted = (micro - 1) * nbytes
    locs = tuple(l for r in ranks if (l := loc(r, hits[r][1][0].get("site"), "optimizer step")))
    return [
        Finding(
            PERF_GRAD_ACCUM_NO_SYNC,
            "warning",
            f"gradient accumulation over {micro} micro-steps all-reduces gradients at every micro-step: "
            f"{micro - 1} of {micro} all-reduces per optimizer step are wasted "
            f"(~{wasted / 1e6:.2f} MB of gradients per step per rank)",
            "Run all micro-steps but the last inside `with model.no_sync():` so DDP all-reduces once per "
            "optimizer step.",
            ranks,
            locs,
            {"micro_steps": micro, "wasted_bytes_per_step": wasted},
            culprits=ranks,
        )
    ]
