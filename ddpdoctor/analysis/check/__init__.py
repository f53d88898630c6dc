"""The check family: mistakes that make DDP training silently wrong.

Data (``data``: set_epoch, sampler seeds, shards, with ``records``, ``fetched`` and ``shards`` behind it),
parameter/buffer drift and seeds (``drift``), several writers of one checkpoint (``checkpoint``) and
gradient accumulation without ``no_sync`` (``perf``). Pure.
"""

from __future__ import annotations

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding
from ddpdoctor.record.reader import RunRecord


def detect(record: RunRecord, config: Config) -> list[Finding]:
    """Every finding of the check family, in report order."""
    from ddpdoctor.analysis.check import checkpoint, data, drift, perf

    return (
        data.detect(record, config)
        + drift.detect(record, config)
        + checkpoint.detect(record, config)
        + perf.detect(record, config)
    )
