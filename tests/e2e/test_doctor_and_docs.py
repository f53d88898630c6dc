"""`ddpdoctor doctor` checks the probes against their docstrings (the ids and their pages: test_catalog.py)."""

from __future__ import annotations

import re
from xml.etree import ElementTree as ET

from helpers import ddpdoctor


def test_doctor_runs_probes_and_reports_each(tmp_path):
    junit = tmp_path / "doctor.xml"
    r = ddpdoctor(
        [
            "doctor",
            "--skip-health",
            "--only",
            "healthy.py",
            "--only",
            "shape_mismatch.py",
            "--run-dir",
            str(tmp_path / "d"),
            "--junit",
            str(junit),
        ],
        tmp_path,
        json_report=False,
    )
    assert r.code == 0, r.out + r.err[-2000:]
    suite = ET.fromstring(junit.read_text())
    assert (suite.get("tests"), suite.get("failures")) == ("2", "0")
    assert sorted(tc.get("name") for tc in suite.findall("testcase")) == ["healthy.py", "shape_mismatch.py"]
    assert re.search(r"^ok\s+healthy.py\s+expected no findings", r.out, re.M)
    assert re.search(r"^ok\s+shape_mismatch.py\s+expected hang.shape-mismatch\s+got hang.shape-mismatch", r.out, re.M)
    assert "2/2 probes" in r.out
