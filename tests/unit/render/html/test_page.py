"""The HTML page (render/html/page.py): a self-contained document with no script and a strict CSP, the
verdict and tally in the header, each finding with its culprit and its places (culprits first, with the
source excerpt), the ranks table, the notes, and everything from the record escaped."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.analysis.findings import Finding, Location, RankLine, Report
from ddpdoctor.record.reader import RunRecord
from ddpdoctor.render.html.page import render


def test_a_healthy_page_is_self_contained_and_says_ok() -> None:
    html = render(Report("check", "ok", 0, "/tmp/run"))
    assert html.startswith("<!DOCTYPE html>") and html.endswith("</body></html>\n")
    assert "<script" not in html and "default-src 'none'" in html
    assert "<title>ddpdoctor check: OK</title>" in html
    assert 'class="verdict v-ok" id="verdict">OK</span>' in html
    assert "no findings · run directory <code>/tmp/run</code>" in html and "<p>No findings.</p>" in html


def test_a_finding_shows_its_culprit_places_excerpt_fix_and_the_ranks(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("\n".join(f"x{i} = {i}" for i in range(1, 40)))
    f = Finding(
        "hang.rank-conditional-collective",
        "error",
        "rank 1 called <all_reduce>",
        "Call it on every rank.",
        (0, 1),
        (Location(0, str(script), 30, "main", "waiting"), Location(1, str(script), 22, "main", "diverged")),
        {"seq": 5},
        culprits=(1,),
    )
    ranks = (
        RankLine(0, "waiting", "in barrier", Location(0, str(script), 30)),
        RankLine(1, "waiting", "in all_reduce"),
    )
    html = render(Report("hang", "hang", 3, str(tmp_path), (f,), ranks, notes=("killed <after> 60 s",)))
    assert "1 error · run directory" in html
    assert 'data-finding="hang.rank-conditional-collective"' in html and 'data-culprits="1"' in html
    assert "rank 1 called &lt;all_reduce&gt;" in html and "<all_reduce>" not in html
    # the culprit's place (line 22) comes before the waiting rank's (line 30)
    assert html.index("train.py:22</code>") < html.index("train.py:30</code>")
    assert '<td class="code">x22 = 22</td>' in html
    assert "<b>fix:</b> Call it on every rank." in html and "<th>seq</th>" in html
    assert '<section id="ranks">' in html and '<td>rank 1 <span class="culprit">culprit</span></td>' in html
    assert "<li>killed &lt;after&gt; 60 s</li>" in html


def test_the_record_adds_script_and_world_size_to_the_header() -> None:
    rec = RunRecord("/run", {"script": "/w/<train>.py", "script_args": ["--lr", "1"]}, {}, [])
    html = render(Report("check", "ok", 0, "/run"), rec)
    assert "script <code>/w/&lt;train&gt;.py --lr 1</code>" in html
