"""Hangs written the way real training scripts are (a Trainer class, async collectives, early stopping at
four ranks, two nodes), run for real under torchrun with gloo: the finding, the culprit ranks, the line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid

import pytest
from helpers import PROBES, TESTS, TOKEN_VAR, assert_no_orphans, ddpdoctor, finding, free_port, lines_of, marker_line

SCRIPTS = TESTS / "scripts"


def test_async_all_reduce_in_rank0_save_branch_is_rank_conditional(tmp_path):
    probe = PROBES / "trainer_async_save.py"
    r = ddpdoctor(["hang", str(probe)], tmp_path)
    assert r.code == 3, r.err[-2000:]
    f = finding(r.report, "hang.rank-conditional-collective")
    assert f["culprits"] == [0]
    assert marker_line(probe, "EXTRA") in lines_of(f, 0)
    assert r.report["verdict"] == "hang"


def test_early_exit_of_some_ranks_at_four_ranks_is_grouped(tmp_path):
    probe = PROBES / "early_exit_some.py"
    r = ddpdoctor(["hang", "--nproc-per-node", "4", str(probe)], tmp_path, timeout=180)
    assert r.code == 3, r.err[-2000:]
    f = finding(r.report, "hang.early-exit")
    assert f["culprits"] == [1, 3]
    for rank in (1, 3):
        assert {marker_line(probe, "STOP"), marker_line(probe, "END")} <= lines_of(f, rank)
    assert marker_line(probe, "STEP") in lines_of(f, 0)
    assert "2 ranks [1,3]" in f["message"] and "2 ranks [0,2]" in f["message"]
    # the text report prints one line per place, not one per rank
    assert f"2 ranks [1,3]: {probe}:{marker_line(probe, 'END')}" in r.out


def test_json_to_stdout_is_one_document_and_the_script_output_goes_to_stderr(tmp_path):
    token = uuid.uuid4().hex
    env = dict(os.environ, **{TOKEN_VAR: token})
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddpdoctor",
            "hang",
            "--json",
            "-",
            "--run-dir",
            str(tmp_path / "run"),
            "--probe",
            "healthy",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        cwd=tmp_path,
    )
    assert_no_orphans(token)
    doc = json.loads(proc.stdout)  # the whole of stdout is one JSON document
    assert doc["schema"] == "ddpdoctor.report" and doc["exit_code"] == proc.returncode
    assert "epoch 1: mean loss" in proc.stderr and "ddpdoctor hang:" in proc.stderr


@pytest.mark.multinode  # two ddpdoctor nodes: the multi-node tier (.ci/run step 7)
def test_two_nodes_each_node_is_honest_and_analyze_names_the_culprit(tmp_path):
    """Two torchrun agents on loopback (c10d rendezvous), one rank each; only global rank 0 reaches a
    barrier; the job store (docs/multinode.md) is unreachable (an address of no host here), so each node sees
    only its own rank. Neither node may say OK or blame the network for what it cannot see; analyze of both
    run directories names rank 0 and its line. (With the store: tests/e2e/test_multinode_store.py.)"""
    script = SCRIPTS / "multinode_barrier.py"
    port, token = free_port(), uuid.uuid4().hex
    env = dict(os.environ, **{TOKEN_VAR: token, "DDPDOCTOR_JOB_STORE": "192.0.2.1:9"})
    procs = []
    for node in (0, 1):
        cmd = [
            sys.executable,
            "-m",
            "ddpdoctor",
            "hang",
            "--nnodes",
            "2",
            "--nproc-per-node",
            "1",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"127.0.0.1:{port}",
            "--rdzv-id",
            token[:8],
            "--timeout",
            "8",
            "--run-dir",
            str(tmp_path / f"node{node}"),
            "--json",
            str(tmp_path / f"node{node}.json"),
            str(script),
        ]
        procs.append(
            subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                cwd=tmp_path,
                start_new_session=True,
            )
        )
    try:
        outs = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        assert_no_orphans(token)
    reports = [json.loads((tmp_path / f"node{n}.json").read_text()) for n in (0, 1)]
    for p, rep, (out, err) in zip(procs, reports, outs):
        # a node whose own ranks finished may say OK for them, never for the job
        assert rep["verdict"] != "ok" or "OK ON THIS NODE" in out, out + err[-2000:]
        assert not any(f["id"] == "hang.transport-stall" for f in rep["findings"])
        assert any("not visible here" in f["message"] for f in rep["findings"]), rep["findings"]
        assert "ddpdoctor analyze" in out
    # the node that ran rank 0 (stuck in the barrier) never passes
    assert any(p.returncode != 0 and rep["verdict"] != "ok" for p, rep in zip(procs, reports))
    r = ddpdoctor(["analyze", str(tmp_path / "node0"), str(tmp_path / "node1")], tmp_path)
    f = finding(r.report, "hang.rank-conditional-collective")
    assert f["culprits"] == [0]
    assert marker_line(script, "EXTRA") in lines_of(f, 0)


def test_receive_deadlock_outside_any_collective_call_is_certain_in_seconds(tmp_path):
    """Both ranks block in Work.wait() of an irecv nobody answers: no rank sits inside a collective call,
    yet the tracked Works prove it in seconds although --timeout is 300."""
    probe = PROBES / "recv_deadlock.py"
    r = ddpdoctor(["hang", "--timeout", "300", str(probe)], tmp_path, timeout=150)
    assert r.code == 3, r.err[-2000:]
    f = finding(r.report, "hang.p2p-deadlock")
    assert f["culprits"] == [0, 1]
    assert "rank 0: blocked at recv_deadlock.py:" in f["message"] and "from rank 1" in f["message"]
    wait, post = marker_line(probe, "WAIT"), marker_line(probe, "WAIT") - 1
    assert lines_of(f, 0) == lines_of(f, 1) == {wait, post}
    assert "every rank waits to receive" in r.err  # the live verdict, long before --timeout


def test_async_mismatch_blocked_at_sync_points_is_certain_in_seconds(tmp_path):
    """Every rank waits on its Works at SYNC; rank 0's extra async all_reduce meets rank 1's broadcast at
    the same position: certain although --timeout is 300, naming the culprit and where each rank blocks."""
    probe = PROBES / "async_sync_point.py"
    r = ddpdoctor(["hang", "--timeout", "300", str(probe)], tmp_path, timeout=150)
    assert r.code == 3, r.err[-2000:]
    f = finding(r.report, "hang.rank-conditional-collective")
    assert f["culprits"] == [0] and marker_line(probe, "EXTRA") in lines_of(f, 0)
    assert "blocked at a sync point" in f["message"] and marker_line(probe, "SYNC") in lines_of(f, 1)
    assert "deadlock:" in r.err


def test_async_collective_only_rank0_issues_waited_in_a_helper(tmp_path):
    probe = PROBES / "async_extra_wait.py"
    r = ddpdoctor(["hang", "--timeout", "10", str(probe)], tmp_path, timeout=150)
    assert r.code == 3, r.err[-2000:]
    f = finding(r.report, "hang.rank-conditional-collective")
    assert f["culprits"] == [0] and marker_line(probe, "EXTRA") in lines_of(f, 0)


def test_pipeline_stages_p2p_does_not_shift_the_first_divergence(tmp_path):
    """gloo counts a send and a recv in the group's sequence on the two ranks that take part only: ranks 0 and 1
    run ahead of rank 2 by one position a step. Rank 2's extra all_reduce is named at its line, not a
    divergence between the stages' all_reduce and rank 2's barrier at the shifted position (it was)."""
    script = SCRIPTS / "pipeline_stages.py"
    r = ddpdoctor(["hang", "--nproc-per-node", "3", "--timeout", "8", str(script), "extra"], tmp_path, timeout=180)
    assert r.code == 3, r.err[-2000:]
    f = finding(r.report, "hang.rank-conditional-collective")
    assert f["culprits"] == [2]
    assert marker_line(script, "EXTRA") in lines_of(f, 2)
    assert marker_line(script, "STEP") in lines_of(f, 0) and marker_line(script, "STEP") in lines_of(f, 1)
