"""The order the suite's tests are handed to the xdist workers: the dearest work first, so that the last minutes
of a run are the unit tier's short tests spread over every worker, not one worker still running a long e2e file
while the others idle (longest-processing-time-first scheduling).

pyproject.toml runs the suite with ``--dist loadgroup --no-loadscope-reorder``: every test is its own unit of
work, but for the files whose module fixture runs jobs that their tests share (``xdist_group`` marks: one
worker, one run), and the units go out in the order made here. Without it, xdist hands out the files with the
most tests first, which are unit files of a second each; the e2e files of a few slow tests came last and made
the tail.

The weights are the CPU seconds per test of each e2e file, as measured on this project's 2-core host
(benchmarks/suite/e2e-cpu-by-file-stop46.txt, ``benchmarks/suite_cpu.py``; test_attach_fr.py's with the three
property tests added after that measurement, about 25 s each); the SLURM tests, whose ranks run under
slurmd where that plugin cannot count them, by their wall time. A file not listed gets the median: the order
only has to be roughly right.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

# file (below tests/) -> (CPU seconds of the file, tests in it) from benchmarks/suite/e2e-cpu-by-file-stop46.txt
_MEASURED: dict[str, tuple[float, int]] = {
    "e2e/test_memleak.py": (84.4, 12),
    "e2e/test_multinode_store.py": (83.0, 5),
    "e2e/test_culprits.py": (77.1, 9),
    "e2e/test_hang_probes.py": (73.4, 12),
    "e2e/test_check_probes.py": (70.3, 10),
    "e2e/test_corpus.py": (60.9, 9),
    "e2e/test_realistic_hangs.py": (56.7, 7),
    "e2e/test_memleak_loaded.py": (53.8, 3),
    "e2e/test_check_realistic.py": (46.8, 5),
    "e2e/test_html.py": (46.0, 14),
    "e2e/test_profile.py": (43.5, 12),
    "e2e/test_memleak_workers.py": (38.2, 3),
    "e2e/test_ncclsim.py": (35.6, 8),
    "e2e/test_memleak_holders.py": (32.2, 5),
    "e2e/test_postmortem_jobs.py": (29.9, 7),
    "e2e/test_probe_failures.py": (29.8, 4),
    "e2e/test_scale.py": (25.8, 5),
    "e2e/test_live_view.py": (24.0, 4),
    "e2e/test_bad_input.py": (16.4, 12),
    "e2e/test_transparency.py": (15.5, 2),
    "e2e/test_plugin.py": (15.2, 2),
    "e2e/test_doctor_health.py": (14.6, 2),
    "e2e/test_teardown.py": (13.8, 2),
    "e2e/test_attach_fr.py": (88.0, 11),
    "e2e/test_postmortem_behind.py": (13.1, 2),
    "e2e/test_doctor_and_docs.py": (11.5, 1),
    "e2e/test_compare.py": (9.3, 1),
    "e2e/test_attach.py": (9.1, 3),
    "e2e/test_frameworks.py": (7.4, 17),
    "e2e/test_script_positional.py": (7.3, 2),
    "e2e/test_doctor_frsettings.py": (7.0, 1),
    "e2e/test_postmortem_busy_rank.py": (5.7, 1),
    "e2e/test_lifecycle.py": (5.4, 3),
    "e2e/test_cli_light.py": (4.4, 3),
    "e2e/test_packaging.py": (1.4, 1),
    # a cluster of two or three nodes started per test, then a 2-4 node job: ~25 s of wall time each
    "e2e/slurm/test_slurm.py": (200.0, 8),
}
_MEDIAN = 5.0  # CPU seconds per test of an e2e file not measured yet


def weight(rel: str) -> float:
    """The expected cost of one test of the file ``rel`` (a path below tests/): 0 for the unit tier."""
    if not rel.startswith("e2e/"):
        return 0.0
    cpu, n = _MEASURED.get(rel, (_MEDIAN, 1))
    return cpu / max(n, 1)


def _group(item: Any) -> str | None:
    m = item.get_closest_marker("xdist_group")
    if m is None:
        return None
    return str(m.args[0] if m.args else m.kwargs.get("name", "default"))


def dearest_first(items: list[Any], tests_dir: Path) -> list[Any]:
    """``items`` in the order the workers should take them: units of work (a test, or a whole xdist group)
    by falling expected cost, ties in collection order (a stable sort: every worker computes the same order,
    which xdist requires)."""
    units: dict[str, list[Any]] = {}
    cost: dict[str, float] = {}
    for item in items:
        try:
            rel = Path(str(item.path)).resolve().relative_to(tests_dir).as_posix()
        except ValueError:
            rel = ""
        group = _group(item)
        key = f"group:{group}" if group else item.nodeid
        units.setdefault(key, []).append(item)
        cost[key] = cost.get(key, 0.0) + weight(rel)
    order: Iterable[str] = sorted(units, key=lambda k: -cost[k])
    return [item for k in order for item in units[k]]
