"""A pytest plugin that records each test's CPU time: its own and that of every process it started and
waited for (torchrun, the ranks, ddpdoctor), which is what the suite costs on a 2-core host, beside the
wall clock. Each xdist worker writes its share; ``python benchmarks/suite_cpu.py OUT`` sums them per file.

    PYTHONPATH=benchmarks SUITE_CPU_OUT=/tmp/cpu python -m pytest -q -p suite_cpu tests/e2e
    python benchmarks/suite_cpu.py /tmp/cpu

CPU time is not free of load either (gloo's threads poll, and a crowded host adds cache misses), so compare
figures taken at like loads.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

_RES: dict[str, list[float]] = {}


def _cpu() -> tuple[float, float]:
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    s = resource.getrusage(resource.RUSAGE_SELF)
    return c.ru_utime + c.ru_stime, s.ru_utime + s.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Iterator[None]:
    """Time one test, its fixtures' set-up included (a shared job is paid by the first test that asks)."""
    c0, s0 = _cpu()
    t0 = time.time()
    yield
    c1, s1 = _cpu()
    _RES[item.nodeid] = [round(c1 - c0, 2), round(s1 - s0, 2), round(time.time() - t0, 1)]


def pytest_sessionfinish(session: Any) -> None:
    """This process's share, one JSON file per worker."""
    out = os.environ.get("SUITE_CPU_OUT", "suite-cpu")
    with open(f"{out}.{os.getpid()}.json", "w") as f:
        json.dump(_RES, f)


def main(prefix: str) -> None:
    """The per-file and per-test table of the shares written under ``prefix``."""
    res: dict[str, list[float]] = {}
    for path in glob.glob(f"{prefix}.*.json"):
        with open(path) as f:
            res.update(json.load(f))
    by_file: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for node, (children, own, _wall) in res.items():
        row = by_file[node.split("::")[0]]
        row[0] += children + own
        row[1] += 1
    total = sum(v[0] for v in by_file.values())
    print(f"{len(res)} tests, {total:.0f} s of CPU in all ({total / 2:.0f} s on 2 cores at best)")
    for name, (cpu, n) in sorted(by_file.items(), key=lambda kv: -kv[1][0]):
        print(f"{cpu:8.1f} s  {int(n):3d} tests  {name}")
    print()
    for node, (children, own, wall) in sorted(res.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:30]:
        print(f"{children + own:7.1f} s CPU {wall:7.1f} s wall  {node}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "suite-cpu")
