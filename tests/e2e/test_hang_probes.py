"""Each fault probe, run for real under torchrun with gloo, gives its finding with the right ranks and lines."""

from __future__ import annotations

import pytest
from helpers import PROBES, ddpdoctor, finding, lines_of, marker_line, script_argv


def run_probe(shared_job, name, *extra, timeout=120):
    """One run of the probe per session, shared by every test that asks for the same arguments."""
    return shared_job.run(script_argv("hang", str(PROBES / name), *extra), timeout=timeout)


def test_healthy_default_workload_has_no_findings(tmp_path):
    r = ddpdoctor(["hang", "--probe", "healthy"], tmp_path)
    assert r.code == 0, r.err[-2000:]
    assert r.report["verdict"] == "ok"
    assert [f for f in r.report["findings"] if f["severity"] == "error"] == []
    assert "epoch 1: mean loss" in r.out + r.err  # the script's own output reaches the user
    assert "ddpdoctor hang: OK" in r.out


def test_rank_conditional_collective_names_rank_0_and_its_line(shared_job):
    r = run_probe(shared_job, "rank_conditional.py")
    assert r.code == 3, r.err[-2000:]
    assert r.report["verdict"] == "hang"
    f = finding(r.report, "hang.rank-conditional-collective")
    probe = PROBES / "rank_conditional.py"
    diverged = [l for l in f["locations"] if l["role"] == "diverged"]
    assert [(l["rank"], l["line"]) for l in diverged] == [(0, marker_line(probe, "EXTRA"))]
    assert f"rank_conditional.py:{marker_line(probe, 'EXTRA')}" in r.out
    # issue 37: a hang's report states ddpdoctor's cost too, from the ranks' last heartbeats (no finish event)
    cost = r.report["cost"]
    assert "ddpdoctor's cost: " in r.out and set(cost["ranks"]) == {"0", "1"}, r.out
    assert cost["train_us_per_step"] >= 0 and cost.get("train_pct", 0) <= 5.0, cost


def test_early_exit_names_the_rank_that_left(shared_job):
    r = run_probe(shared_job, "early_exit.py")
    assert r.code == 3, r.err[-2000:]
    f = finding(r.report, "hang.early-exit")
    probe = PROBES / "early_exit.py"
    assert f["evidence"]["divergence"]["diverged"] == [1]
    assert marker_line(probe, "LAST") in lines_of(f, 1)
    assert marker_line(probe, "STEP") in lines_of(f, 0)


def test_uneven_batches(shared_job):
    r = run_probe(shared_job, "uneven_batches.py")
    assert r.code == 3, r.err[-2000:]
    f = finding(r.report, "hang.uneven-batches")
    probe = PROBES / "uneven_batches.py"
    assert f["evidence"]["dataloader_len"] == {"0": 6, "1": 4}
    assert marker_line(probe, "BACKWARD") in lines_of(f, 0)
    assert marker_line(probe, "EPOCH_END") in lines_of(f, 1)


def test_shape_mismatch(shared_job):
    r = run_probe(shared_job, "shape_mismatch.py")
    assert r.code == 3, r.err[-2000:]
    f = finding(r.report, "hang.shape-mismatch")
    line = marker_line(PROBES / "shape_mismatch.py", "GATHER")
    assert lines_of(f, 0) == {line} and lines_of(f, 1) == {line}


def test_crash_names_the_raising_rank_not_the_victim(shared_job):
    r = run_probe(shared_job, "crash.py")
    assert r.code == 1, r.err[-2000:]
    assert r.report["verdict"] == "crash"
    f = finding(r.report, "crash.exception")
    raised = [l for l in f["locations"] if l["role"] == "raised"]
    assert [(l["rank"], l["line"]) for l in raised] == [(1, marker_line(PROBES / "crash.py", "RAISE"))]
    assert [l["rank"] for l in f["locations"] if l["role"] == "victim"] == [0]
    assert "ValueError" in f["message"]


def test_exception_in_dataloader_worker_points_at_the_worker_line(shared_job):
    r = run_probe(shared_job, "dataloader_crash.py")
    assert r.code == 1, r.err[-2000:]
    f = finding(r.report, "crash.exception")
    raised = [l for l in f["locations"] if l["role"].startswith("raised")]
    assert [(l["rank"], l["line"]) for l in raised] == [
        (1, marker_line(PROBES / "dataloader_crash.py", "WORKER_RAISE"))
    ]
    assert "KeyError" in f["message"]


def test_uncertain_wait_is_a_hang_only_after_timeout(shared_job):
    r = run_probe(shared_job, "slow_rank.py", "--timeout", "3")
    assert r.code == 3, r.err[-2000:]
    f = finding(r.report, "hang.timeout")
    probe = PROBES / "slow_rank.py"
    roles = {(l["rank"], l["role"], l["line"]) for l in f["locations"]}
    assert (1, "waiting", marker_line(probe, "BARRIER")) in roles
    assert (0, "busy", marker_line(probe, "EVAL")) in roles
    assert "waiting" in r.err and "busy at slow_rank.py" in r.err  # the live line


def test_long_step_without_collective_is_not_a_hang(shared_job):
    r = run_probe(shared_job, "slow_step.py", "--timeout", "2", "--", "--sleep", "4")
    assert r.code == 0, r.err[-2000:]
    assert r.report["verdict"] == "ok"


@pytest.mark.extended  # one of the README tier's slowest jobs (stop 57: the tier read 554-562 s)
def test_mp_spawn_script_is_detected_and_diagnosed(shared_job):
    r = run_probe(shared_job, "spawn_conditional.py")
    assert "mode spawn" in r.err
    assert r.code == 3, r.err[-2000:]
    f = finding(r.report, "hang.rank-conditional-collective")
    diverged = [(l["rank"], l["line"]) for l in f["locations"] if l["role"] == "diverged"]
    assert diverged == [(0, marker_line(PROBES / "spawn_conditional.py", "EXTRA"))]


@pytest.mark.parametrize("fmt", ["json", "junit"])
def test_analyze_rediagnoses_a_saved_run_identically(shared_job, tmp_path, fmt):
    r = run_probe(shared_job, "shape_mismatch.py")
    again = ddpdoctor(["analyze", str(r.run_dir)], tmp_path)
    assert again.code == r.code == 3
    assert [f["id"] for f in again.report["findings"]] == [f["id"] for f in r.report["findings"]]
    assert [f["locations"] for f in again.report["findings"]] == [f["locations"] for f in r.report["findings"]]
