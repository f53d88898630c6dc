"""The profile family: where each rank's step time goes (``breakdown``, from the phases ``steps`` reads
out of each rank's timeline): stragglers, data-loader-bound steps, GPU utilisation. Pure."""

from __future__ import annotations

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding
from ddpdoctor.record.reader import RunRecord


def detect(record: RunRecord, config: Config) -> list[Finding]:
    """Every finding of the profile family."""
    from ddpdoctor.analysis.profile import backward, breakdown, exposed

    # + a straggler inside backward; + the all-reduce the backward did not hide
    return backward.add(breakdown.detect(record, config), record) + exposed.detect(record)
