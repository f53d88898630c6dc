"""memleak's per-step memory lines in-process, on a fake rank-0 probe (tests/fakeprobe.py): every one of
the first steps has its line, a fast loop later has one at most every ``SAMPLE_EVERY_S`` (reading RSS
costs more than the rest of a step's bookkeeping), a slow loop keeps one per step, and ``--census-every``
stays exact to the step between the lines."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

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
    memory.scan_grew, memory.scan_streak = True, 1
    assert memory._floor(100, 0) is None  # one new high (a warm-up's first graph) is not sustained growth
    memory.scan_streak = 2
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


def test_the_graph_scan_has_a_floor_in_steps_while_its_graphs_grow(
    memory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37's Hugging Face case: each scan of a growing graph is dearer, so the budget alone spaced the
    scans geometrically and left the run's later half two points. While the scans set new highs, one is due
    every step / SCAN_FLOOR_RATIO steps; not on a flat loop; over the CPU cap it is skipped and counted."""
    from ddpdoctor.rank.probes.memleak import sampler

    cpu = [100.0]
    monkeypatch.setattr(sampler, "_cpu", lambda: cpu[0])
    memory.cpu_first, memory.overhead, memory.last_scan_step = 0.0, 0.0, 200
    memory.scan_streak = 1
    assert not memory._scan_floor(260)  # one new high is not sustained growth
    memory.scan_streak = 2
    assert not memory._scan_floor(220)  # 20 steps since the last scan; the gap at 220 is 27
    assert memory._scan_floor(230)  # 30 >= max(LOCAL_EVERY, 230 // SCAN_FLOOR_RATIO)
    memory.overhead = sampler.FLOOR_CAP * cpu[0] + 1.0
    assert not memory._scan_floor(230) and memory.floor_skipped == 1
    assert not memory._scan_floor(240) and memory.floor_skipped == 1  # once per gap
    # in a loop: scans as dear as 1,000 steps' budget still come every step / 8 steps while the graph grows
    memory.overhead, memory.floor_next, cpu[0] = 0.0, 0, 1e6
    monkeypatch.setattr(memory, "_due", lambda *a: None)  # the census schedule is not under test here
    nodes = [0]

    def scan(frame: Any, names: Any, growth: Any) -> tuple[int, int, None]:
        nodes[0] += 100
        cpu[0] += 10.0  # each scan takes 10 s of CPU: by the budget, the next one would be 500 s away
        return nodes[0], 1, None

    monkeypatch.setattr(sampler.census_mod, "local_graphs", scan)
    memory.step, memory.last_scan_step, memory.last_scan_cost, memory.last_scan_nodes = 400, 400, 1000.0, 0
    memory.last_scan_t = time.perf_counter()
    for _ in range(400):
        memory.on_step("optimizer")
    scans = [r["step"] for r in fakeprobe.kinds(_lines(memory), schema.K_MEM) if "local_graph" in r]
    assert len(scans) >= 5 and all(
        b - a <= max(sampler.LOCAL_EVERY, b // sampler.SCAN_FLOOR_RATIO) for a, b in zip(scans, scans[1:])
    ), scans


def test_the_floor_keeps_censuses_under_budgets_a_busy_host_would_exhaust(
    memory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each census costs as much as 200 steps' budget: the shares alone would give none between steps 64 and
    512; the floor gives several per doubling while the graph grows."""
    from ddpdoctor.rank.probes.memleak import sampler

    monkeypatch.setattr(sampler, "_cpu", lambda: 1e6)  # the loop's CPU time is ample: the cap never binds
    memory.t_first, memory.last_census_step, memory.last_census_t = 0.0, 64, 0.0
    # the probes have taken more than the growth doublings allow (FREE_CENSUS_S): only the floor is left
    memory.last_census_cost, memory.overhead, memory.scan_grew, memory.scan_streak = 1e6, 3.0, True, 2
    taken = []
    for s in range(65, 513):
        why = memory._due(s, 1.0, 0)
        if why:
            taken.append((s, why))
            memory.last_census_step = s
    assert {w for _s, w in taken} == {"floor"} and len(taken) >= 6, taken
    assert memory.floor_skipped == 0


def _censuses(
    m: Any, steps: int, *, rss: Callable[[int], int], nodes: Callable[[int], int], cost: float = 0.05
) -> list[tuple[int, str]]:
    """Drive ``steps`` optimizer steps with RSS and the scan's graph nodes given per step, each census
    replaced by a record of (step, why) that counts ``cost`` (a real one of a torch heap: 50 ms)."""
    from ddpdoctor.rank.probes.memleak import census as census_mod

    taken: list[tuple[int, str]] = []

    def census(frame: Any, why: str, rss_now: int | None = None, final: bool = False) -> None:
        taken.append((m.step, why))
        m.last_census_cost, m.last_census_t, m.last_census_step = cost, time.perf_counter(), m.step
        m.last_census_rss = m.rss()
        m.overhead += cost

    m.census = census
    m.rss = lambda: rss(m.step)
    real_scan = census_mod.local_graphs
    try:
        census_mod.local_graphs = lambda frame, names, growth: (nodes(m.step), 1, None)
        for _ in range(steps):
            time.sleep(0.0005)  # a step of a fast loop: the scans' budgets count in time
            m.on_step("optimizer")
    finally:
        census_mod.local_graphs = real_scan
    return taken


def test_a_healthy_loop_gets_its_first_census_and_no_free_doublings(memory: Any) -> None:
    """Issue 37: a loop that warms up (RSS +6 MiB and a graph of 11 nodes seen once, in its first steps) and
    then stays flat pays for its first census only; the doublings at 2..32 used to cost it 7 % of a 1.7 ms
    step (each census walks the ~300k objects of a torch process)."""
    base = 300 * 2**20
    taken = _censuses(
        memory, 600, rss=lambda s: base if s < 2 else base + 6 * 2**20, nodes=lambda s: 0 if s < 2 else 11
    )
    assert taken == [(1, "first")], taken


def test_a_growing_graph_gets_its_doublings_and_rss_growth_its_censuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A graph that keeps growing (new highs at scan after scan) earns the doublings from the start; RSS that
    keeps rising earns them too. The same warm-up without more growth earns none (the test above)."""
    from ddpdoctor.rank.probes.memleak import sampler

    base = 300 * 2**20
    m = _memory(tmp_path, monkeypatch, None)
    try:
        # censuses of 1 ms: the floor's CPU cap (a quarter of this thread's CPU time) does not bind here
        taken = _censuses(m, 300, rss=lambda s: base, nodes=lambda s: 10 * s, cost=0.001)
        # the second scan in a row with a new high (step 11) earns the doublings, then the floor keeps a
        # census at least every step / FLOOR_RATIO steps
        assert taken[:3] == [(1, "first"), (11, "doubling"), (22, "doubling")], taken
        gaps = [(b - a, b) for (a, _w), (b, v) in zip(taken, taken[1:]) if v == "floor" and a > 32]
        assert all(g <= max(sampler.LOCAL_EVERY, s // sampler.FLOOR_RATIO) + 1 for g, s in gaps), taken
        assert taken[-1][0] >= 300 - 300 // sampler.FLOOR_RATIO - 1, taken
    finally:
        fakeprobe.close(m.p)
    (tmp_path / "rss").mkdir()
    m = _memory(tmp_path / "rss", monkeypatch, None)
    try:
        taken = _censuses(m, 300, rss=lambda s: base + s * 2**20, nodes=lambda s: 0, cost=0.001)
        assert len(taken) >= 4 and taken[0] == (1, "first"), taken
        assert {w for _s, w in taken[1:]} <= {"doubling", "rss"}, taken
    finally:
        fakeprobe.close(m.p)


def test_once_the_holders_are_named_the_growth_takes_the_explained_budget(memory: Any) -> None:
    """A growth whose holders the last census named: no free doublings and no floor; the growth and RSS
    rules at EXPLAINED_BUDGET (the series goes on in the per-step lines and the scans)."""
    from ddpdoctor.rank.probes.memleak import sampler

    now = 100.0
    memory.t_first, memory.overhead = 0.0, 3.0  # 3 % of the run's 100 s so far
    memory.last_census_step, memory.last_census_t, memory.last_census_cost = 64, now - 1.0, 0.05
    memory.scan_streak, memory.scan_grew, memory.census_grew = 3, True, True
    assert memory._due(128, now, 0) == "doubling"  # unnamed: the doublings while growth is seen (RSS_BUDGET)
    memory.explained = True
    # over EXPLAINED_BUDGET of the run: no doubling; 1 s since the last census: the growth rule's 5 % would
    # allow one, EXPLAINED_BUDGET's 2 % (2.5 s) not yet
    assert memory._due(128, now, 0) is None and memory._due(100, now, 0) is None
    assert memory.last_census_cost / sampler.EXPLAINED_BUDGET > 1.0 >= memory.last_census_cost / sampler.GROWTH_BUDGET
    assert memory._due(100, now + 2.0, 0) == "growth"
