"""memleak's per-step memory lines in-process, on a fake rank-0 probe (tests/fakeprobe.py): every one of
the first steps has its line, a fast loop later has one at most every ``SAMPLE_EVERY_S`` (reading RSS
costs more than the rest of a step's bookkeeping), a slow loop keeps one per step, and ``--census-every`` and
the planned censuses (``--steps``) stay exact to the step between the lines; the lines, formatted together at
each flush, keep the time each was taken."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeprobe
import pytest
from torch.utils.data import dataloader as dl_mod

from ddpdoctor.record import schema


def _memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, census_every: int | None, stop_steps: int | None = None
) -> Any:
    from ddpdoctor.rank.probes.memleak import sampler

    # the probe wraps the DataLoader's iterator reset and shutdown: restored after the test
    cls = dl_mod._MultiProcessingDataLoaderIter
    monkeypatch.setattr(cls, "_reset", cls._reset)
    monkeypatch.setattr(cls, "_shutdown_workers", cls._shutdown_workers)
    p = fakeprobe.make_probe(tmp_path)
    return sampler.Memory(p, census_every, stop_steps)


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
        memory.on_step()
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
        memory.on_step()
    for _ in range(8):
        time.sleep(sampler.SAMPLE_EVERY_S * 1.5)
        memory.on_step()
    steps = [r["step"] for r in fakeprobe.kinds(_lines(memory), schema.K_MEM)]
    assert steps[-8:] == list(range(sampler.EARLY_STEPS + 1, sampler.EARLY_STEPS + 9))


def test_census_every_is_exact_between_the_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = _memory(tmp_path, monkeypatch, 50)
    try:
        for _ in range(300):
            m.on_step()
        censuses = [r for r in fakeprobe.records(m.p, schema.MEMORY) if r.get("kind") == schema.K_CENSUS]
        assert [c["step"] for c in censuses] == [1, 50, 100, 150, 200, 250, 300]
    finally:
        fakeprobe.close(m.p)


def test_planned_censuses_are_exact_between_the_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the run's length known (``--steps 400``), the evenly spaced censuses and the one two steps before
    the end fall on their steps in a fast loop, though most steps have no line and skip the rest of the
    schedule (issue 51: the per-step cost of a millisecond step)."""
    m = _memory(tmp_path, monkeypatch, None, 400)
    try:
        plan = list(m.plan)
        for _ in range(400):
            m.on_step()
        censuses = [r for r in fakeprobe.records(m.p, schema.MEMORY) if r.get("kind") == schema.K_CENSUS]
        assert [c["step"] for c in censuses if c["why"] == "planned"] == plan == [50, 100, 150, 200, 250, 300, 350, 398]
    finally:
        fakeprobe.close(m.p)


def test_the_lines_written_together_keep_the_time_each_was_taken(memory: Any) -> None:
    """A flush writes the lines kept since the last one; each line's ``t`` is its step's time, not the flush's."""
    from ddpdoctor.rank.probes.memleak import sampler

    for _ in range(sampler.EARLY_STEPS):
        memory.on_step()
    memory.flush()
    taken = []
    for _ in range(5):
        time.sleep(sampler.SAMPLE_EVERY_S * 1.5)
        taken.append(time.time())
        memory.on_step()
    lines = fakeprobe.kinds(_lines(memory), schema.K_MEM)[-5:]
    assert [r["step"] for r in lines] == list(range(sampler.EARLY_STEPS + 1, sampler.EARLY_STEPS + 6))
    assert all(abs(r["t"] - t) < 0.01 for r, t in zip(lines, taken, strict=True)), ([r["t"] for r in lines], taken)
    assert all({"v", "kind", "rank", "t", "step", "rss"} <= set(r) and r["rss"] > 0 for r in lines)


def test_the_census_floor_is_counted_in_steps_while_growth_is_seen(
    memory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37: while the graphs grow, a census is due every step / FLOOR_RATIO steps whatever the shares
    allow; over its CPU cap the floor is skipped, counted once per gap, and never due on a flat loop."""
    from ddpdoctor.rank.probes.memleak import sampler

    cpu = [100.0]
    monkeypatch.setattr(sampler, "_cpu", lambda: cpu[0])
    memory.cpu_first, memory.last_census_step, memory.overhead = 0.0, 70, 0.0
    memory.scan_grew = False
    memory.census_grew = True  # the censuses' counts alone (a cache filling once) make no floor
    assert memory._floor(100, 0) is None and memory._floor(100, 10 * sampler.RSS_TRIGGER) is None
    memory.last_census_step = 20
    memory.scan_grew = True
    assert memory._floor(sampler.FREE_CENSUS_STEPS, 0) is None  # the free doublings cover the first steps
    memory.last_census_step = 70
    memory.scan_grew = True
    assert memory._floor(90, 0) is None  # 20 steps since the last census, the gap at 90 is 22
    assert memory._floor(100, 0) == "floor"  # 30 >= max(LOCAL_EVERY, 100 // FLOOR_RATIO)
    # the probes have taken more than FLOOR_CAP of the training thread's CPU time: skipped, and said so
    memory.overhead = sampler.FLOOR_CAP * cpu[0] + 1.0
    assert memory._floor(100, 0) is None and memory.floor_skipped == 1
    assert all(memory._floor(s, 0) is None for s in range(101, 125)) and memory.floor_skipped == 1
    assert memory._floor(125, 0) is None and memory.floor_skipped == 2  # one count per gap, not per step
    cpu[0] = 1000.0  # the loop's own CPU time caught up: the floor resumes
    assert memory._floor(160, 0) == "floor"


def test_the_floor_keeps_censuses_under_budgets_a_busy_host_would_exhaust(
    memory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each census costs as much as 200 steps' budget: the shares alone would give none between steps 64 and
    512; the floor gives several per doubling while the graph grows."""
    from ddpdoctor.rank.probes.memleak import sampler

    monkeypatch.setattr(sampler, "_cpu", lambda: 1e6)  # the loop's CPU time is ample: the cap never binds
    memory.t_first, memory.last_census_step, memory.last_census_t = 0.0, 64, 0.0
    # the probes have taken more than the growth doublings allow (FREE_CENSUS_S): only the floor is left
    memory.last_census_cost, memory.overhead, memory.scan_grew = 1e6, 3.0, True
    taken = []
    for s in range(65, 513):
        why = memory._due(s, 1.0, 0)
        if why:
            taken.append((s, why))
            memory.last_census_step = s
    assert {w for _s, w in taken} == {"floor"} and len(taken) >= 6, taken
    assert memory.floor_skipped == 0
