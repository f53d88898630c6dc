"""The report's figures for ``ddpdoctor compare`` (analysis/figures.py): step medians per rank from the
timeline, memory growth per step and last value from the mem lines, each only when the record has it."""

from __future__ import annotations

import timelines

from ddpdoctor.analysis.figures import compute
from ddpdoctor.record.reader import RankRecord, RunRecord


def _record(ranks: dict[int, RankRecord]) -> RunRecord:
    return RunRecord("/run", {}, ranks, [])


def test_a_record_without_timeline_or_memory_has_no_figures() -> None:
    assert compute(_record({0: RankRecord(0), 1: RankRecord(1)})) == {}


def test_step_medians_in_ms_per_rank() -> None:
    rec = _record(
        {0: RankRecord(0, timeline=timelines.steps(10)), 1: RankRecord(1, timeline=timelines.steps(10, forward=20))}
    )
    step = compute(rec)["step_ms"]
    assert set(step) == {"0", "1"}
    assert step["0"]["step"] == 40.0 and step["1"]["step"] == 50.0 and step["1"]["forward"] == 20.0
    assert "memory" not in compute(rec)


def test_memory_growth_per_step_and_last_value() -> None:
    mem = [{"kind": "mem", "step": s, "rss": 100_000_000 + 4096 * s, "cuda_allocated": 2**30} for s in range(1, 51)]
    rec = _record({0: RankRecord(0, memory=mem), 1: RankRecord(1, memory=mem[:2])})
    got = compute(rec)["memory"]
    assert list(got) == ["0"]  # rank 1: too few points for a slope
    assert got["0"] == {
        "rss_bytes_per_step": 4096.0,
        "rss_last_bytes": 100_000_000 + 4096 * 50,
        "cuda_bytes_per_step": 0.0,
        "cuda_last_bytes": 2**30,
        "steps": 50,
    }
