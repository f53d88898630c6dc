"""The pytest plugin (entry point ``pytest11``): the ``ddpdoctor_run`` fixture runs a script under ddpdoctor
with real ranks and returns its report."""

from __future__ import annotations

import pytest
from helpers import PROBES, marker_line


def test_plugin_healthy_script_passes(ddpdoctor_run):
    report = ddpdoctor_run(PROBES / "healthy.py", command="check", nproc=2, args=["--epochs", "1"])
    report.assert_healthy()
    assert report.exit_code == 0 and report.verdict == "ok"
    assert not report.ids("error")


def test_plugin_fault_fails_with_the_text_report(ddpdoctor_run):
    report = ddpdoctor_run(PROBES / "check_set_epoch.py", command="check", nproc=2, fail_on="error")
    assert report.exit_code == 1 and report.verdict == "findings"
    f = report.finding("data.missing-set-epoch")
    assert f["severity"] == "error" and sorted(f["culprits"]) == [0, 1]
    assert marker_line(PROBES / "check_set_epoch.py", "LOOP") in {l["line"] for l in f["locations"]}
    with pytest.raises(pytest.fail.Exception) as e:
        report.assert_healthy()
    assert "ddpdoctor check: FINDINGS (exit code 1)" in str(e.value)
    assert "data.missing-set-epoch" in str(e.value) and "fix:" in str(e.value)
