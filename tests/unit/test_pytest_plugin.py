"""The pytest plugin's pure parts (pytest_plugin.py; its ``ddpdoctor_run`` fixture runs real jobs and is
tested end to end): keyword options become command-line options, and the returned report finds its
findings and fails a test with ddpdoctor's text unless the run was healthy."""

from __future__ import annotations

import pytest

from ddpdoctor.pytest_plugin import DdpdoctorReport, _option_args


def test_options_become_command_line_options() -> None:
    assert _option_args({"steps": 20, "fail_on": "warning", "snapshot": True, "nsys": False, "x": None}) == [
        "--steps", "20", "--fail-on", "warning", "--snapshot",
    ]  # fmt: skip
    assert _option_args({"only": ["a.py", "b.py"]}) == ["--only", "a.py", "--only", "b.py"]


def _report(code: int, findings: list[dict]) -> DdpdoctorReport:
    return DdpdoctorReport(code, "findings" if code else "ok", findings, "ddpdoctor check: FINDINGS ...", "/run")


def test_the_report_finds_findings_and_fails_unhealthy_runs() -> None:
    r = _report(
        1, [{"id": "data.shard-overlap", "severity": "error"}, {"id": "seed.identical-streams", "severity": "note"}]
    )
    assert r.ids() == ["data.shard-overlap", "seed.identical-streams"] and r.ids("note") == ["seed.identical-streams"]
    assert r.finding("data.shard-overlap")["severity"] == "error"
    with pytest.raises(
        AssertionError,
        match=r"no finding hang.x; findings: \['data.shard-overlap', 'seed.identical-streams'\]\nddpdoctor check",
    ):
        r.finding("hang.x")
    with pytest.raises(pytest.fail.Exception, match=r"ddpdoctor: findings \(exit code 1\)\nddpdoctor check: FINDINGS"):
        r.assert_healthy()
    _report(0, []).assert_healthy()
