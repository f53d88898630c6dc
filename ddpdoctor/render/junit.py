"""JUnit XML: one test case per finding family checked, failing where an error was found."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from ddpdoctor.analysis.findings import Report


def render(report: Report) -> str:
    suite = ET.Element("testsuite", name=f"ddpdoctor.{report.command}")
    props = ET.SubElement(suite, "properties")
    for k, v in (("verdict", report.verdict), ("exit_code", str(report.exit_code)), ("run_dir", report.run_dir)):
        ET.SubElement(props, "property", name=k, value=v)
    cases = 0
    failures = 0
    for f in report.findings:
        cases += 1
        tc = ET.SubElement(suite, "testcase", classname=f"ddpdoctor.{report.command}", name=f.id)
        locs = ", ".join(f"rank {l.rank} {l.file}:{l.line}" for l in f.locations)
        body = f"{f.message}\n{locs}\nhint: {f.hint}"
        if f.severity == "error":
            failures += 1
            ET.SubElement(tc, "failure", message=f.message[:500], type=f.id).text = body
        else:
            ET.SubElement(tc, "system-out").text = body
    if not report.findings:
        cases = 1
        ET.SubElement(suite, "testcase", classname=f"ddpdoctor.{report.command}", name="healthy")
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", "0")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
