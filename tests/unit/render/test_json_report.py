"""The versioned JSON report (render/json_report.py): schema and version, each finding with ranks,
culprits, locations (function and role), evidence; the ranks with their location; notes and figures;
values JSON does not know written as text."""

from __future__ import annotations

import json
from pathlib import Path

from ddpdoctor.analysis.findings import REPORT_SCHEMA, REPORT_VERSION, Finding, Location, RankLine, Report
from ddpdoctor.render.json_report import render, to_dict


def test_the_report_as_json() -> None:
    f = Finding(
        "data.shard-overlap", "error", "overlap", "fix it", (0, 1), (Location(1, "/w/t.py", 30, "main", "DataLoader"),),
        {"path": Path("/ck.pt")}, culprits=(1,),
    )  # fmt: skip
    report = Report(
        "check", "findings", 1, "/run", (f,), (RankLine(1, "finished", "exit 0", Location(1, "/w/t.py", 99)),),
        "1 error", ("a note",), {"step_ms": {"0": {"step": 40.0}}},
    )  # fmt: skip
    d = json.loads(render(report))
    assert (d["schema"], d["version"]) == (REPORT_SCHEMA, REPORT_VERSION) == ("ddpdoctor.report", 2)
    assert (d["command"], d["verdict"], d["exit_code"], d["run_dir"], d["summary"]) == (
        "check",
        "findings",
        1,
        "/run",
        "1 error",
    )
    (jf,) = d["findings"]
    assert jf["ranks"] == [0, 1] and jf["culprits"] == [1] and jf["hint"] == "fix it"
    assert jf["locations"] == [{"rank": 1, "file": "/w/t.py", "line": 30, "function": "main", "role": "DataLoader"}]
    assert jf["evidence"] == {"path": "/ck.pt"}  # a Path as text
    assert d["ranks"] == [{"rank": 1, "state": "finished", "detail": "exit 0",
                           "location": {"rank": 1, "file": "/w/t.py", "line": 99, "function": "", "role": ""}}]  # fmt: skip
    assert d["notes"] == ["a note"] and d["figures"] == {"step_ms": {"0": {"step": 40.0}}}


def test_a_healthy_report_has_empty_lists() -> None:
    d = to_dict(Report("hang", "ok", 0, "/run"))
    assert d["findings"] == [] and d["ranks"] == [] and d["notes"] == [] and d["figures"] == {}
