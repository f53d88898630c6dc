"""The hang report's picture: one lane per rank over time, the rank that diverged marked at its collective,
the first divergence a line across the lanes, each rank's wait a bar to the verdict. Pure: the recorded
rank_conditional run (tests/golden: rank 0 makes an extra all_reduce at #13)."""

from __future__ import annotations

import re
import shutil

from helpers import ROOT

from ddpdoctor.analysis import diagnose
from ddpdoctor.analysis.config import Config
from ddpdoctor.record.reader import load_run
from ddpdoctor.render.lanes import MAX_LANES, applies, lanes_svg

GOLDEN = ROOT / "tests" / "golden"


def run_of(tmp_path, name):
    shutil.copytree(GOLDEN / name, tmp_path / name)
    record = load_run(str(tmp_path / name))
    return record, diagnose(record, Config(), str(record.manifest.get("command")))


def lane(svg: str, rank: int) -> str:
    m = re.search(rf'<g class="lane" data-rank="{rank}"[^>]*>(.*?)</g>', svg, re.S)
    assert m, f"no lane for rank {rank}"
    return m.group(0)


def test_a_lane_per_rank_with_the_divergence_marked(tmp_path):
    record, report = run_of(tmp_path, "rank_conditional")
    assert report.verdict == "hang" and applies(record, report)
    svg = lanes_svg(record, report)
    zero, one = lane(svg, 0), lane(svg, 1)
    assert 'data-culprit="1"' in zero and "data-culprit" not in one  # only the rank that diverged
    assert 'class="diverged"' in zero and 'class="diverged"' not in one
    assert "#13 all_reduce at rank_conditional.py:31 (diverged)" in zero
    assert "waits in barrier #16 at rank_conditional.py:32" in one
    assert zero.count('class="wait"') == 1 and one.count('class="wait"') == 1
    assert len(re.findall(r'class="coll"', zero)) == len(record.ranks[0].ledger)  # each collective a tick
    (line,) = re.findall(r'<line class="divergence" x1="([\d.]+)"', svg)
    (dot,) = re.findall(r'<circle class="diverged" cx="([\d.]+)"', zero)
    assert line == dot and "first divergence: collective #13 of group 0" in svg
    # the waits reach the verdict: the right end of the time axis
    ends = [float(x) + float(w) for x, w in re.findall(r'class="wait" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', svg)]
    assert max(ends) - min(ends) < 0.5


def test_the_hang_report_shows_the_picture(tmp_path):
    from ddpdoctor.render.html.page import render

    record, report = run_of(tmp_path, "rank_conditional")
    html = render(report, record)
    hang = re.search(r'<section id="hang">(.*?)</section>', html, re.S)
    assert hang and '<svg xmlns="http://www.w3.org/2000/svg" class="lanes"' in hang.group(1)


def test_a_healthy_run_has_no_picture(tmp_path):
    from ddpdoctor.render.html.page import render

    record, report = run_of(tmp_path, "healthy")
    assert report.verdict == "ok" and not applies(record, report)
    assert 'class="lanes"' not in render(report, record)


def test_many_ranks_give_a_bounded_picture(tmp_path):
    from builder import RunBuilder, pending

    from ddpdoctor.analysis.findings import Finding, Report

    b = RunBuilder(tmp_path / "run")
    for r in range(64):
        b.start(r)
        for s in (1, 2, 3):
            b.coll(r, s, 10)
        b.hb(r, 6.0, 4, pending("all_reduce", 4, 20, 5.0) if r == 40 else pending("barrier", 4, 30, 5.0, shapes=()))
    record = load_run(str(tmp_path / "run"))
    f = Finding(
        "hang.rank-conditional-collective", "error", "first divergence at collective #4", "", tuple(range(64)), (),
        {"divergence": {"group": "0", "seq": 4, "diverged": [40]}}, (40,),
    )  # fmt: skip
    svg = lanes_svg(record, Report("hang", "hang", 3, str(tmp_path / "run"), (f,)))
    drawn = [int(x) for x in re.search(r'data-ranks="([\d,]+)"', svg).group(1).split(",")]
    assert len(drawn) == MAX_LANES and drawn[0] == 40 and f"Shown: {MAX_LANES} of 64 ranks" in svg
    assert "#4 all_reduce at train.py:20 (diverged)" in lane(svg, 40)
    assert len(svg) < 40_000


def test_a_long_wait_breaks_the_axis_so_the_collectives_spread_out(tmp_path):
    record, report = run_of(tmp_path, "rank_conditional")
    svg = lanes_svg(record, report)
    xs = sorted(float(x) for x in re.findall(r'<line class="coll" x1="([\d.]+)"', lane(svg, 0)))
    # the golden run's collectives span milliseconds, its wait seconds: without the break they sat in a few
    # pixels; with it they spread over most of the lane's width before the break
    assert "axis-break" in svg and "of waiting" in svg
    assert xs[-1] - xs[0] > 0.5 * (1000 - 110 - 20)


def test_a_short_wait_keeps_one_linear_axis(tmp_path):
    from builder import RunBuilder, pending

    from ddpdoctor.analysis.findings import Finding, Report

    b = RunBuilder(tmp_path / "run")
    for r in range(2):
        b.start(r)
        for s in (1, 2, 3):
            b.coll(r, s, 10, t=float(s))
        b.hb(r, 4.5, 4, pending("barrier", 4, 30, 4.0, shapes=()))
    record = load_run(str(tmp_path / "run"))
    f = Finding("hang.timeout", "error", "x", "", (0, 1), (), {}, ())
    svg = lanes_svg(record, Report("hang", "hang", 3, str(tmp_path / "run"), (f,)))
    assert "axis-break" not in svg
