"""The self-test's probe list (health/selftest.py): every built-in probe with an ``Expected finding`` line
is listed with its expected id (or none), its self-test options and command; an unknown --only name is
refused naming the probes."""

from __future__ import annotations

import re

import pytest

from ddpdoctor.analysis.catalog import CATALOG
from ddpdoctor.errors import DdpdoctorError
from ddpdoctor.health.selftest import check_only, probes


def test_every_probe_expects_a_catalogued_finding_or_none() -> None:
    ps = probes()
    assert ps and len({p.name for p in ps}) == len(ps)
    assert all(p.name.endswith(".py") and not p.name.startswith("_") for p in ps)
    assert {p.command for p in ps} <= {"hang", "check", "memleak", "profile"}
    unknown = [(p.name, p.expected) for p in ps if p.expected is not None and p.expected not in CATALOG]
    assert unknown == []
    assert any(p.expected is None for p in ps) and any(p.expected for p in ps)
    assert all(isinstance(p.options, tuple) for p in ps)


def test_an_unknown_only_name_is_refused() -> None:
    name = probes()[0].name
    check_only((name,))
    with pytest.raises(DdpdoctorError, match=re.escape("--only nope.py: no such probe (probes: ")):
        check_only((name, "nope.py"))


def _report(run_dir, *findings):
    from types import SimpleNamespace

    return SimpleNamespace(run_dir=str(run_dir), findings=list(findings))


def test_a_probe_run_killed_before_any_init_never_began_and_a_script_error_did(tmp_path) -> None:
    from builder import RunBuilder

    from ddpdoctor.analysis.findings import Finding
    from ddpdoctor.health.selftest import never_began

    killed = Finding(
        "crash.abnormal-exit", "error", "the run ended abnormally: rank 2: ended without finishing", "", ()
    )
    b = RunBuilder(tmp_path / "killed")
    for r in (0, 1):  # each rank started, none initialised
        b.add(r, "events.jsonl", "start", 0.0, pid=999999, local_rank=r)
    assert never_began(_report(b.root, killed)) == killed.message
    raised = Finding("crash.exception", "error", "rank 1 raised ValueError", "", (1,))
    assert never_began(_report(b.root, raised)) is None  # a script's own error is a verdict, not a non-start
    began = RunBuilder(tmp_path / "began").start(0).start(1)
    assert never_began(_report(began.root, killed)) is None  # a rank initialised: the scenario began
