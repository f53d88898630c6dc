"""tests/schedule.py: the order the xdist workers take the suite's tests in (dearest first, groups whole)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from schedule import dearest_first, weight

TESTS = Path(__file__).resolve().parents[1]


@dataclass
class Item:
    """What dearest_first reads of a pytest item: its path, node id and xdist_group mark."""

    rel: str
    name: str
    group: str | None = None
    marks: list[Any] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return TESTS / self.rel

    @property
    def nodeid(self) -> str:
        return f"tests/{self.rel}::{self.name}"

    def get_closest_marker(self, name: str) -> Any:
        return pytest.mark.xdist_group(self.group).mark if name == "xdist_group" and self.group else None


def test_the_unit_tier_weighs_nothing_and_a_known_e2e_file_its_cpu_per_test() -> None:
    assert weight("unit/analysis/test_catalog.py") == 0.0
    assert weight("e2e/test_memleak_loaded.py") == pytest.approx(53.8 / 3)  # its CPU over its tests
    assert weight("e2e/test_not_measured_yet.py") > 0


def test_dear_tests_go_first_groups_stay_whole_and_ties_keep_their_order() -> None:
    items = [
        Item("unit/test_units.py", "a"),
        Item("e2e/test_cli_light.py", "b"),
        Item("e2e/test_html.py", "h1", group="html"),
        Item("unit/test_units.py", "c"),
        Item("e2e/test_memleak_loaded.py", "m"),
        Item("e2e/test_html.py", "h2", group="html"),
    ]
    got = [i.name for i in dearest_first(items, TESTS)]
    # the html group weighs two of its tests (2 x 2.4 s), less than one loaded memleak test (27 s)
    assert got == ["m", "h1", "h2", "b", "a", "c"]


def test_an_xdist_group_runs_whole_on_one_worker(tmp_path):
    """The module fixtures that run real jobs for their tests (test_postmortem_jobs.py, ...) are shared only if
    xdist keeps their group on one worker: with the installed pytest and pytest-xdist it does (on pytest 9,
    xdist 3.8 split every group: pyproject.toml pins pytest<9)."""
    import subprocess
    import sys

    (tmp_path / "test_grouped.py").write_text(
        "import os\nimport pytest\n\npytestmark = pytest.mark.xdist_group('one')\n\n\n"
        "@pytest.mark.parametrize('i', range(6))\n"
        "def test_it(i):\n"
        "    with open('workers.txt', 'a') as f:\n"
        "        f.write(os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "3", "--dist", "loadgroup"]
        + ["test_grouped.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    ran = (tmp_path / "workers.txt").read_text().split()
    assert len(ran) == 6 and len(set(ran)) == 1, ran
