"""A pipeline of three stages with p2p on gloo (tests/frjobs/stagejob.py: every step rank 0 sends to rank 1 and
rank 1 to rank 2, then all three all-reduce and meet at a barrier), live under ``ddpdoctor hang`` and from the
same job's own flight-recorder dumps (plain torchrun, frjob.py's watchdog). Healthy, it reads OK both ways;
with the middle stage's extra all-reduce at one step, the report names the middle stage (rank 1) and its extra
call: live at its line, from the dumps (pickle and JSON alike: the culprit never rests on the frames only the
pickle carries) by its position, read against its own earlier steps, and at its line where the pickle has it. With the middle stage's send left out at one
step, live names it at that send; its own dumps name it too (gloo records no p2p op, but its op ids count them:
the middle stage's step has one op fewer than each of its earlier steps), at its next call after the gap.
Three-rank jobs: the ``extended`` tier."""

from __future__ import annotations

from pathlib import Path

import pytest
from frjobs.jobs import STAGE_JOB, dumped, run_job
from helpers import ddpdoctor, finding, lines_of, marker_line

pytestmark = [pytest.mark.extended, pytest.mark.xdist_group("stage-jobs")]


def _live(case: str, tmp_path: Path):
    # the job's own watchdog stays out of the way (ddpdoctor proves the deadlock); a healthy run dumps at its
    # end, into the test's folder
    env = {
        "FRJOB_STALL": "600",
        "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "rank_"),
        "FRJOB_JSON_PREFIX": str(tmp_path / "json_rank_"),
    }
    return ddpdoctor(["hang", "--nproc-per-node", "3", str(STAGE_JOB), case], tmp_path, timeout=180, env=env)


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each case's job under plain torchrun, every rank dumped by its watchdog (or at the end, healthy)."""
    out = {}
    for case in ("healthy", "extra", "skip"):
        for attempt in range(2):  # the dumps race the agent's end of the job: one rerun on a lost race
            d = run_job(case, tmp_path_factory.mktemp(f"{case}-{attempt}"), job=STAGE_JOB, nproc=3)
            if dumped(d) == {0, 1, 2}:
                break
        assert dumped(d) == {0, 1, 2}, (case, dumped(d), (d / "torchrun.log").read_text()[-2000:])
        out[case] = d
    return out


def test_live_healthy_pipeline_reads_ok(tmp_path):
    res = _live("healthy", tmp_path)
    assert res.report is not None, res.err[-2000:]
    errors = [f["id"] for f in res.report["findings"] if f["severity"] == "error"]
    assert (res.code, res.report["verdict"], errors) == (0, "ok", []), res.report["findings"]


def test_live_extra_collective_of_a_stage_names_it_at_its_line(tmp_path):
    res = _live("extra", tmp_path)
    assert res.code == 3, res.err[-2000:]
    f = finding(res.report, "hang.rank-conditional-collective")
    assert f["culprits"] == [1], f["message"]
    assert marker_line(STAGE_JOB, "EXTRA") in lines_of(f, 1), f["locations"]
    assert marker_line(STAGE_JOB, "GUARD") in lines_of(f, 1), f["locations"]  # the rank test that led there
    for victim in (0, 2):  # the other stages wait in the step's all-reduce
        assert lines_of(f, victim) == {marker_line(STAGE_JOB, "STEP")}, f["locations"]


def test_live_skipped_send_of_a_stage_names_it_at_the_send_it_left_out(tmp_path):
    # the stages' programs differ by role (send; recv and send; recv): the middle stage is read against its
    # own earlier steps, which each sent to rank 2 at SEND1
    res = _live("skip", tmp_path)
    assert res.code == 3, res.err[-2000:]
    f = finding(res.report, "hang.rank-conditional-collective")
    assert f["culprits"] == [1], f["message"]
    assert lines_of(f, 1) == {marker_line(STAGE_JOB, "SEND1")}, f["locations"]
    assert "skipped its send" in f["message"], f["message"]
    assert lines_of(f, 2) == {marker_line(STAGE_JOB, "RECV2")}, f["locations"]  # stranded in its receive
    assert lines_of(f, 0) == {marker_line(STAGE_JOB, "STEP")}, f["locations"]


@pytest.mark.parametrize("fmt", ["fr", "json"])
def test_own_dumps_of_the_healthy_pipeline_read_ok(dumps, fmt, tmp_path):
    res = ddpdoctor(["analyze", str(dumps["healthy"] / fmt)], tmp_path)
    assert res.report is not None, res.err[-2000:]
    assert (res.code, res.report["verdict"]) == (0, "ok"), res.report["findings"]


@pytest.mark.parametrize("fmt", ["fr", "json"])
def test_own_dumps_of_the_extra_collective_name_the_stage_at_its_extra_call(dumps, fmt, tmp_path):
    """The extra all-reduce has the step's own shape: it met the others' step all-reduce, and rank 1's own step
    all-reduce then stands where the others' barrier does. Each stage read against its own earlier steps (p2p
    ops counted by gloo's op ids) names rank 1's extra call (#7), at its line where the pickle has the frames.
    Before, the dumps read `hang.divergent-collective` at the next call's line (STEP)."""
    res = ddpdoctor(["analyze", str(dumps["extra"] / fmt)], tmp_path)
    assert res.code == 3, res.err + res.out
    assert res.report["verdict"] == "hang"
    (f,) = [f for f in res.report["findings"] if f["severity"] == "error"]
    assert (f["id"], f["culprits"]) == ("hang.rank-conditional-collective", [1]), f["message"]
    assert f["evidence"]["divergence"]["seq"] == 7, f["evidence"]
    if fmt == "fr":  # the pickle has the frames: the lines
        assert lines_of(f, 1) == {marker_line(STAGE_JOB, "EXTRA")}, f["locations"]
        assert lines_of(f, 0) == lines_of(f, 2) == {marker_line(STAGE_JOB, "BAR")}, f["locations"]
    else:
        assert f["locations"] == [], f["locations"]


@pytest.mark.parametrize("fmt", ["fr", "json"])
def test_own_dumps_of_the_skipped_send_name_the_stage_not_the_one_it_starved(dumps, fmt, tmp_path):
    """Rank 2 waits in a receive that its dump does not show (nothing pending): it read as the rank behind. The
    middle stage's op ids say its step 3 made one p2p op fewer than each earlier step: it is the culprit."""
    res = ddpdoctor(["analyze", str(dumps["skip"] / fmt)], tmp_path)
    assert res.code == 3, res.err + res.out
    (f,) = [f for f in res.report["findings"] if f["severity"] == "error"]
    assert (f["id"], f["culprits"]) == ("hang.rank-conditional-collective", [1]), f["message"]
    assert "skipped a point-to-point call" in f["message"], f["message"]
    if fmt == "fr":  # the pickle has the frames: the call after the gap (the send's own line is not recorded)
        assert lines_of(f, 1) == {marker_line(STAGE_JOB, "STEP")}, f["locations"]
