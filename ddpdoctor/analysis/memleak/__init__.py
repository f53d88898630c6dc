"""The memleak family: memory that grows step after step, on which rank and why (``growth``). Pure."""

from __future__ import annotations

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding
from ddpdoctor.record.reader import RunRecord


def detect(record: RunRecord, config: Config) -> list[Finding]:
    """Every finding of the memleak family."""
    from ddpdoctor.analysis.memleak import growth

    return growth.detect(record, config)
