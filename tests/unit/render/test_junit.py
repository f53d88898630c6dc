"""JUnit XML (render/junit.py): one test case per finding, a failure for each error only, one passing
``healthy`` case when there is nothing, the verdict as a property."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from ddpdoctor.analysis.findings import Finding, Location, Report
from ddpdoctor.render.junit import render


def _parse(report: Report) -> ET.Element:
    text = render(report)
    assert text.startswith('<?xml version="1.0" encoding="utf-8"?>\n')
    return ET.fromstring(text.split("\n", 1)[1])


def test_a_healthy_report_is_one_passing_case() -> None:
    suite = _parse(Report("check", "ok", 0, "/r"))
    assert (suite.get("name"), suite.get("tests"), suite.get("failures")) == ("ddpdoctor.check", "1", "0")
    (case,) = suite.findall("testcase")
    assert case.get("name") == "healthy" and case.find("failure") is None
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props == {"verdict": "ok", "exit_code": "0", "run_dir": "/r"}


def test_errors_fail_and_warnings_pass_with_their_text() -> None:
    err = Finding(
        "data.shard-overlap", "error", "x" * 600, "Use DistributedSampler.", (0, 1), (Location(1, "/w/t.py", 30),)
    )
    warn = Finding("perf.grad-accum-no-sync", "warning", "accumulation all-reduces")
    suite = _parse(Report("check", "findings", 1, "/r", (err, warn)))
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "0")
    c1, c2 = suite.findall("testcase")
    fail = c1.find("failure")
    assert c1.get("name") == "data.shard-overlap" and fail.get("type") == "data.shard-overlap"
    assert len(fail.get("message")) == 500  # cut for CI tools
    assert fail.text.endswith("\nrank 1 /w/t.py:30\nhint: Use DistributedSampler.")
    assert c2.find("failure") is None and c2.find("system-out").text.startswith("accumulation all-reduces\n")
