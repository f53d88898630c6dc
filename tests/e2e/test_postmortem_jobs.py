"""`ddpdoctor analyze` on the records of jobs that never ran under ddpdoctor: real gloo ranks under plain
torchrun with torch's flight recorder on (tests/frjobs/frjob.py), whose watchdog dumps as NCCL's does.
Each test asserts what the user sees: verdict, exit code, finding, culprit rank and line."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from frjobs.jobs import JOB, dumped, run_job
from helpers import ddpdoctor, finding, lines_of, marker_line

# one worker runs the module fixture's jobs once; the extended tier since stop 57 (the fixture alone took 41 s
# of the README's run; the golden dumps of tests/golden/ keep analyze's verdicts in the README's tier)
pytestmark = [pytest.mark.xdist_group("postmortem-jobs"), pytest.mark.extended]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One real run per case, shared by the tests of this module (each run takes a few seconds)."""

    def one(case: str, monitor: float | None, want: set[int]) -> Path:
        for attempt in range(2):  # the dumps race the agent's end of the job: one rerun on a lost race
            d = run_job(case, tmp_path_factory.mktemp(f"{case}-{attempt}"), monitor_interval=monitor)
            if dumped(d) == want:
                break
        assert dumped(d) == want, (case, dumped(d), (d / "torchrun.log").read_text()[-2000:])
        return d

    cases = (
        ("extra", None, {0, 1}),
        ("kill", 8, {0}),
        ("raise", 8, {0}),
        ("healthy", None, {0, 1}),
        ("teardown", None, {1}),
        ("helper", None, {0, 1}),
        ("size0", None, {1}),
    )
    # the worker's base folder made here, before the threads: pytest makes it on first use, and four threads
    # that all find it missing race to make it ("File exists: .../popen-gw1", or "kill-0 is not a normalized
    # and relative path" from the one that lost), where this module is the first of its worker to ask
    tmp_path_factory.getbasetemp()
    # side by side: two of them wait out torchrun's 8 s monitor interval, which costs no CPU
    with ThreadPoolExecutor(len(cases)) as pool:
        futures = {case: pool.submit(one, case, monitor, want) for case, monitor, want in cases}
        return {case: f.result() for case, f in futures.items()}


@pytest.mark.parametrize("fmt", ["fr", "json"])
def test_extra_collective_on_another_group_names_the_rank_that_made_it(jobs, tmp_path, fmt):
    res = ddpdoctor(["analyze", str(jobs["extra"] / fmt)], tmp_path)
    assert res.code == 3, res.err + res.out
    assert res.report["verdict"] == "hang"
    f = finding(res.report, "hang.rank-conditional-collective")
    assert f["culprits"] == [1]
    assert "extra" in f["message"] and "missing" not in f["message"]
    if fmt == "fr":  # the pickle has the stacks: the user's lines
        assert lines_of(f, 1) == {marker_line(JOB, "EXTRA")}
        assert lines_of(f, 0) == {marker_line(JOB, "REGULAR")}
    else:
        assert any("no Python stacks" in n for n in res.report["notes"])


def test_rank_killed_without_dump_is_the_culprit_not_torchruns_root_cause(jobs, tmp_path):
    # torchrun's own summary names rank 0 (its "Connection closed by peer" came first); rank 1 was killed
    res = ddpdoctor(["analyze", str(jobs["kill"])], tmp_path)
    assert res.code == 1, res.err + res.out
    f = finding(res.report, "crash.abnormal-exit")
    assert f["culprits"] == [1]
    assert "SIGKILL" in f["message"] and "left no flight-recorder dump" in f["message"]
    assert lines_of(f, 0) == {marker_line(JOB, "REGULAR")}


def test_rank_without_dump_is_the_first_suspect_from_dumps_and_log_folder(jobs, tmp_path):
    # no error file and no summary: only rank 0's dump and torchrun's log folder (two local ranks)
    res = ddpdoctor(["analyze", str(jobs["kill"] / "fr"), str(jobs["kill"] / "logs")], tmp_path)
    assert res.code in (1, 3), res.err + res.out  # 3: rank 0's dump shows #N pending; 1: gloo marked it done
    f = finding(res.report, "postmortem.no-dump")
    assert f["culprits"] == [1] and f["severity"] == "error"
    assert "first suspect is rank 1" in f["message"]
    assert lines_of(f, 0) == {marker_line(JOB, "REGULAR")}
    rank1 = next(r for r in res.report["ranks"] if r["rank"] == 1)
    assert rank1["detail"] == "left no flight-recorder dump"


def test_exception_from_error_file_with_its_line(jobs, tmp_path):
    res = ddpdoctor(["analyze", str(jobs["raise"])], tmp_path)
    assert res.code == 1, res.err + res.out
    f = finding(res.report, "crash.exception")
    assert f["culprits"] == [1]
    assert "loss is nan at step 3" in f["message"]
    assert lines_of(f, 1) == {marker_line(JOB, "RAISE")}
    assert lines_of(f, 0) == {marker_line(JOB, "REGULAR")}


@pytest.mark.parametrize("fmt", ["fr", "json"])
def test_dump_and_exit_race_names_the_rank_that_dumped_not_the_rank_torchrun_ended(jobs, tmp_path, fmt):
    # rank 1's watchdog dumped and ended it inside its extra all_reduce on group 1; torchrun then SIGTERMed
    # rank 0 before any dump of its own (frjob.py's teardown case): rank 0 is the teardown's victim
    d = jobs["teardown"]
    log = (d / "torchrun.log").read_text()
    assert "SIGTERM" in log and "exitcode  : 6" in log  # the premise: rank 1 exited, rank 0 was ended
    res = ddpdoctor(["analyze", str(d / fmt), str(d / "torchrun.log")], tmp_path)
    assert res.code == 3, res.err + res.out
    assert [f["id"] for f in res.report["findings"]] == ["hang.rank-conditional-collective"]
    f = res.report["findings"][0]
    assert f["culprits"] == [1]
    assert "#1 of group 1" in f["message"] and "teardown" in f["message"]
    if fmt == "fr":
        assert lines_of(f, 1) == {marker_line(JOB, "EXTRA")}
    rank0 = next(r for r in res.report["ranks"] if r["rank"] == 0)
    assert "teardown" in rank0["detail"]


@pytest.mark.parametrize("fmt", ["fr", "json"])
def test_extra_call_on_a_side_group_through_a_helper_names_the_rank_without_frames_too(jobs, tmp_path, fmt):
    # both ranks all-reduce on the side group through a helper at step 0, rank 1 alone again at step 2: the
    # JSON dumps carry no frames, and the culprit must not depend on them (only the line does)
    res = ddpdoctor(["analyze", str(jobs["helper"] / fmt)], tmp_path)
    assert res.code == 3, res.err + res.out
    f = finding(res.report, "hang.rank-conditional-collective")
    assert f["culprits"] == [1], f["message"]
    assert "#2 of group 1" in f["message"] or "group 1 (#2)" in f["message"]
    if fmt == "fr":
        assert marker_line(JOB, "EXTRA_HELPER") in lines_of(f, 1)


def test_size_mismatch_that_aborted_rank_0_shows_the_call_rank_1_was_in(jobs, tmp_path):
    # rank 0 all-reduces 4 elements where rank 1 reduces 8: gloo aborts rank 0 (no dump); rank 1's dump holds
    # the call it was in, which gloo marks completed
    res = ddpdoctor(["analyze", str(jobs["size0"])], tmp_path)
    assert res.code == 1, res.err + res.out
    f = finding(res.report, "crash.abnormal-exit")
    assert f["culprits"] == [0]
    # pending where the dump came before gloo retired the failed call, else its last (gloo marks it completed)
    call = rf"rank 1 (in|last called) all_reduce\(\[8\]\) #3 of group 0 at frjob.py:{marker_line(JOB, 'REGULAR')}\b"
    assert re.search(call, f["message"]), f["message"]
    assert lines_of(f, 0) == {marker_line(JOB, "SIZE0")} and lines_of(f, 1) == {marker_line(JOB, "REGULAR")}


def test_healthy_job_is_ok(jobs, tmp_path):
    res = ddpdoctor(["analyze", str(jobs["healthy"])], tmp_path)
    assert res.code == 0, res.err + res.out
    assert res.report["verdict"] == "ok" and res.report["findings"] == []


def test_truncated_dump_is_one_line_exit_2(jobs, tmp_path):
    data = (jobs["extra"] / "fr" / "rank_0").read_bytes()
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "rank_0").write_bytes(data[: len(data) // 2])
    res = ddpdoctor(["analyze", str(tmp_path / "d")], tmp_path)
    assert res.code == 2
    assert res.err.strip().count("\n") == 0 and "truncated" in res.err and "Traceback" not in res.err
