"""report.html marks culprits only where a finding names them: never on a note, never on a rank that only
waits or is healthy, and a culprit never shares a row with other ranks. Pure: recorded runs (tests/golden)."""

from __future__ import annotations

import re
import shutil

from helpers import ROOT

from ddpdoctor.analysis import diagnose
from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, Location, RankLine, Report
from ddpdoctor.record.reader import load_run
from ddpdoctor.render.html.page import render

GOLDEN = ROOT / "tests" / "golden"


def section(html: str, sid: str) -> str:
    m = re.search(rf'<section id="{sid}">(.*?)</section>', html, re.S)
    assert m, f"no section {sid}"
    return m.group(1)


def test_a_healthy_check_runs_note_has_no_culprit_badge(tmp_path):
    shutil.copytree(GOLDEN / "healthy", tmp_path / "run")
    record = load_run(str(tmp_path / "run"))
    report = diagnose(record, Config(), "check")
    assert [(f.id, f.severity, f.culprits) for f in report.findings] == [("seed.identical-streams", "note", ())]
    html = render(report, record)
    assert "seed.identical-streams" in html and 'class="culprit"' not in html


def test_only_the_leaking_rank_is_marked(tmp_path):
    shutil.copytree(GOLDEN / "leak_graph", tmp_path / "run")
    record = load_run(str(tmp_path / "run"))
    script = str(ROOT / "probes" / "leak_graph.py")
    leak = Finding(
        "memleak.rss", "error", "rank 1's RSS grows", "free it", (0, 1), (Location(1, script, 5, "main", "leaks"),),
        culprits=(1,),
    )  # fmt: skip
    same = "finished (exit code 0); 60 DDP steps"  # both ranks read the same in the ranks table
    ranks = tuple(RankLine(r, "finished", same, Location(r, script, 5)) for r in (0, 1))
    html = render(Report("memleak", "findings", 1, str(tmp_path / "run"), (leak,), ranks), record)
    rows = re.findall(r"<tr><td>(.*?)</td>", section(html, "ranks"))
    assert rows == ['rank 1 <span class="culprit">culprit</span>', "rank 0"], rows
    badge = re.findall(r'data-culprits="([^"]*)"', section(html, "findings"))
    assert badge == ["1"]
