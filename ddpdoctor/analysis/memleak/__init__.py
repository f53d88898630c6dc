"""The memleak family: memory that grows step after step, on which rank and why (``growth``), and
DataLoader workers whose private memory grows (``workers``). Pure."""

from __future__ import annotations

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding
from ddpdoctor.record.reader import RunRecord


def detect(record: RunRecord, config: Config) -> list[Finding]:
    """Every finding of the memleak family."""
    from ddpdoctor.analysis.memleak import growth, workers

    found = workers.detect(record, config)
    out = growth.detect(record, config)
    if found:  # the workers' USS says more (which worker, how much, the Dataset's store) than their summed RSS
        out = [f for f in out if f.id != workers.ID]
    return out + found
