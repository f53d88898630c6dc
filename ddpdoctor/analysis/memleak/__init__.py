"""The memleak family, judged here in one order (pure): the evidence (``evidence``: each rank's per-step
memory lines and censuses), then autograd graphs and live tensors that grow (``growth``), GPU memory by
layer (``cuda``: a graph or tensor finding already explains allocated growth), the process's layers (RSS,
Python objects: what the findings before do not explain), and DataLoader workers whose private memory
grows (``workers``: their USS says more than their summed RSS)."""

from __future__ import annotations

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding
from ddpdoctor.record.reader import RunRecord


def detect(record: RunRecord, config: Config) -> list[Finding]:
    """Every finding of the memleak family."""
    from ddpdoctor.analysis.memleak import cuda, evidence, growth, workers

    out: list[Finding] = []
    census, steps = evidence.census(record), evidence.steps(record)
    ranks = sorted(r for r in record.ranks if steps.get(r))
    if ranks:
        out += growth.graphs(census, ranks, steps, record)
        out += growth.tensor_groups(census, ranks, {f.id for f in out}, record)
        out += cuda.detect(record, steps, census, ranks, {f.id for f in out})
        out += growth.layers(census, steps, ranks, {f.id for f in out if f.severity == "error"}, record)
    found = workers.detect(record, config)
    if found:  # the workers' USS says more (which worker, how much, the Dataset's store) than their summed RSS
        out = [f for f in out if f.id != workers.ID]
    return out + found
