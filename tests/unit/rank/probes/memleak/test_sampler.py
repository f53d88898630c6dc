"""memleak's per-step memory lines in-process, on a fake rank-0 probe (tests/fakeprobe.py): every one of
the first steps has its line, a fast loop later has one at most every ``SAMPLE_EVERY_S`` (reading RSS
costs more than the rest of a step's bookkeeping), a slow loop keeps one per step, and ``--census-every``
stays exact to the step between the lines."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeprobe
import pytest
from torch.utils.data import dataloader as dl_mod

from ddpdoctor.record import schema


def _memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, census_every: int | None) -> Any:
    from ddpdoctor.rank.probes.memleak import sampler

    # the probe wraps the DataLoader's iterator reset: restored after the test
    cls = dl_mod._MultiProcessingDataLoaderIter
    monkeypatch.setattr(cls, "_reset", cls._reset)
    p = fakeprobe.make_probe(tmp_path)
    return sampler.Memory(p, census_every)


@pytest.fixture
def memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    m = _memory(tmp_path, monkeypatch, None)
    yield m
    fakeprobe.close(m.p)


def _lines(m: Any) -> list[dict[str, Any]]:
    m.flush()
    return fakeprobe.records(m.p, schema.MEMORY)


def test_first_steps_each_have_a_line_then_a_fast_loop_is_sampled(memory: Any) -> None:
    from ddpdoctor.rank.probes.memleak import sampler

    t0 = time.perf_counter()
    for _ in range(2000):
        memory.on_step("optimizer")
    elapsed = time.perf_counter() - t0
    steps = [r["step"] for r in fakeprobe.kinds(_lines(memory), schema.K_MEM)]
    assert steps[: sampler.EARLY_STEPS] == list(range(1, sampler.EARLY_STEPS + 1))
    later = [s for s in steps if s > sampler.EARLY_STEPS]
    # a line per SAMPLE_EVERY_S at most (and the graph scans', each LOCAL_EVERY steps apart at least)
    bound = elapsed / sampler.SAMPLE_EVERY_S + (2000 - sampler.EARLY_STEPS) / sampler.LOCAL_EVERY + 2
    assert len(later) <= bound, (len(later), elapsed)
    assert len(later) < 2000 - sampler.EARLY_STEPS  # fewer lines than steps
    assert all(isinstance(r.get("rss"), int) and r["rss"] > 0 for r in fakeprobe.kinds(_lines(memory), schema.K_MEM))


def test_a_step_slower_than_the_sample_period_keeps_its_line(memory: Any) -> None:
    from ddpdoctor.rank.probes.memleak import sampler

    for _ in range(sampler.EARLY_STEPS):
        memory.on_step("optimizer")
    for _ in range(8):
        time.sleep(sampler.SAMPLE_EVERY_S * 1.5)
        memory.on_step("optimizer")
    steps = [r["step"] for r in fakeprobe.kinds(_lines(memory), schema.K_MEM)]
    assert steps[-8:] == list(range(sampler.EARLY_STEPS + 1, sampler.EARLY_STEPS + 9))


def test_census_every_is_exact_between_the_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = _memory(tmp_path, monkeypatch, 50)
    try:
        for _ in range(300):
            m.on_step("optimizer")
        censuses = [r for r in fakeprobe.records(m.p, schema.MEMORY) if r.get("kind") == schema.K_CENSUS]
        assert [c["step"] for c in censuses] == [1, 50, 100, 150, 200, 250, 300]
    finally:
        fakeprobe.close(m.p)
