"""The profile section of the HTML report (render/html/profile.py): absent without medians or a
timeline; stacked bars per rank with the straggler marked; a lane per rank of a few steady steps; the
trace linked."""

from __future__ import annotations

import timelines

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Report
from ddpdoctor.analysis.profile.breakdown import detect
from ddpdoctor.record.reader import RankRecord, RunRecord
from ddpdoctor.render.html.parts import Sources
from ddpdoctor.render.html.profile import section


def _record(tls: dict[int, list[dict]]) -> RunRecord:
    return RunRecord("/nonexistent-run", {}, {r: RankRecord(r, timeline=tl) for r, tl in tls.items()}, [])


def test_no_timeline_and_no_summary_no_section() -> None:
    assert section(Report("profile", "ok", 0, "/r"), _record({0: []}), Sources()) == ""


def test_bars_mark_the_straggler_and_the_trace_is_linked() -> None:
    rec = _record(
        {0: timelines.steps(10, backward=50), 1: timelines.steps(10, backward=50), 2: timelines.steps(10, forward=40)}
    )
    findings = tuple(detect(rec, Config()))
    assert [f.id for f in findings] == ["profile.straggler", "profile.summary"]
    html = section(Report("profile", "findings", 0, "/r", findings), rec, Sources())
    assert html.startswith('<section id="profile"><h2>Where the step time goes</h2>')
    assert "rank 2 (straggler)" in html and "rank 0 (straggler)" not in html
    assert '<a href="trace.json">trace.json</a>' in html and html.endswith("</section>")


def test_a_timeline_alone_still_draws_the_lanes() -> None:
    html = section(
        Report("profile", "ok", 0, "/r"), _record({0: timelines.steps(10), 1: timelines.steps(10)}), Sources()
    )
    assert 'class="timeline"' in html and "Median milliseconds" not in html
    assert '<g class="lane" data-rank="0"' in html and '<g class="lane" data-rank="1"' in html
    assert "<title>rank 0: forward 10.0 ms</title>" in html
