"""One ddpdoctor per node under SLURM (launch/leader.py): task 0 of a node leads and records its exit code;
the node's other tasks wait for it and exit with that code, or say why not (it never started, it was killed),
in bounded time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor.launch import leader
from ddpdoctor.launch.launchers import slurm_step

ENV = {
    "SLURM_JOB_ID": "9",
    "SLURM_STEP_ID": "0",
    "SLURM_STEP_NODELIST": "n[0-1]",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURMD_NODENAME": "n0",
    "SLURM_LOCALID": "0",
}


def test_the_leader_records_its_exit_code_and_a_follower_takes_it(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc, leader.per_node(ENV, tmp=str(tmp_path)):
        sys.exit(3)
    assert exc.value.code == 3
    step = slurm_step(dict(ENV, SLURM_LOCALID="1"))
    assert step is not None and step.local_id == 1
    lines: list[str] = []
    assert leader.follow(step, say=lines.append, tmp=str(tmp_path)) == 3
    assert len(lines) == 1 and "task 1 on n0 of job step 9.0 waits for task 0" in lines[0]
    assert "--ntasks-per-node=1" in lines[0]


def test_a_follower_exits_with_the_leaders_code(tmp_path: Path) -> None:
    with leader.per_node(ENV, tmp=str(tmp_path)):
        pass  # the leader ends normally: 0
    with pytest.raises(SystemExit) as exc:
        with leader.per_node(dict(ENV, SLURM_LOCALID="1"), tmp=str(tmp_path)):
            raise AssertionError("a follower never runs the command")
    assert exc.value.code == 0


def test_a_follower_does_not_wait_forever(tmp_path: Path) -> None:
    step = slurm_step(dict(ENV, SLURM_LOCALID="1"))
    assert step is not None
    lines: list[str] = []
    assert leader.follow(step, say=lines.append, tmp=str(tmp_path), start_wait=0.5) == 4
    assert "did not start within" in lines[-1]
    # a leader that was killed (its process gone, no exit code): 1, said in one line
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    base = leader._base(step, str(tmp_path))
    import psutil

    Path(base + ".leader").write_text(json.dumps({"pid": int(dead.stdout), "created": psutil.Process().create_time()}))
    assert leader.follow(step, say=lines.append, tmp=str(tmp_path)) == 1
    assert "ended without an exit code" in lines[-1]


def test_a_stale_leader_of_the_same_ids_is_not_followed(tmp_path: Path) -> None:
    """A cluster whose job ids started again: the files of an earlier step 1.0 on this node are ignored."""
    step = slurm_step(dict(ENV, SLURM_LOCALID="1"))
    assert step is not None
    base = leader._base(step, str(tmp_path))
    Path(base + ".leader").write_text(json.dumps({"pid": 1, "created": 1000.0}))
    Path(base + ".rc").write_text(json.dumps({"rc": 0, "pid": 1}))
    lines: list[str] = []
    assert leader.follow(step, say=lines.append, tmp=str(tmp_path), start_wait=0.5) == 4


def test_outside_slurm_or_inside_torchrun_nothing_happens(tmp_path: Path) -> None:
    for env in ({}, dict(ENV, SLURM_LOCALID="1", LOCAL_RANK="0")):
        with leader.per_node(env, tmp=str(tmp_path)):
            pass
    assert not list(tmp_path.rglob("*.rc"))


def test_a_leader_folder_that_is_not_private_is_refused(tmp_path):
    import os

    import pytest

    from ddpdoctor.errors import DdpdoctorError
    from ddpdoctor.launch import leader
    from ddpdoctor.launch.launchers import slurm_step

    env = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_NODELIST": "n0"}
    step = slurm_step({**env, "SLURMD_NODENAME": "n0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"})
    assert step is not None
    d = tmp_path / f"ddpdoctor-{os.getuid()}"
    d.mkdir(mode=0o777)
    os.chmod(d, 0o777)  # world-writable: someone else could plant a leader's exit code there
    with pytest.raises(DdpdoctorError, match="not this user's private folder"):
        leader._base(step, str(tmp_path))
    os.chmod(d, 0o700)
    assert leader._base(step, str(tmp_path)).startswith(str(d))


def test_a_follower_never_takes_the_code_of_another_clusters_leader(tmp_path: Path) -> None:
    """Two clusters sharing one /tmp (both have a job 1, step 0 on a host n0): seen in CI, where two test
    clusters ran side by side and a follower exited with the other cluster's hang code (3)."""
    with pytest.raises(SystemExit), leader.per_node(dict(ENV, SLURM_CLUSTER_NAME="a"), tmp=str(tmp_path)):
        sys.exit(3)
    step = slurm_step(dict(ENV, SLURM_LOCALID="1", SLURM_CLUSTER_NAME="b"))
    assert step is not None and step.cluster == "b"
    lines: list[str] = []
    assert leader.follow(step, say=lines.append, tmp=str(tmp_path), start_wait=0.5) == 4  # b's leader never came
    mine = slurm_step(dict(ENV, SLURM_LOCALID="1", SLURM_CLUSTER_NAME="a"))
    assert mine is not None and leader.follow(mine, say=lines.append, tmp=str(tmp_path)) == 3


TWO = dict(ENV, SLURM_STEP_TASKS_PER_NODE="2(x2)")


def test_every_follower_writes_the_leaders_report_where_its_own_json_asks(tmp_path: Path) -> None:
    # issue 52: with two tasks a node, the follower's --json gets the job's report, not nothing
    with pytest.raises(SystemExit), leader.per_node(TWO, tmp=str(tmp_path)):
        leader.publish_report(lambda: '{"verdict": "crash"}', TWO, tmp=str(tmp_path))
        sys.exit(1)
    mine = tmp_path / "task1.json"
    step = slurm_step(dict(TWO, SLURM_LOCALID="1"))
    assert step is not None
    assert leader.follow(step, say=[].append, tmp=str(tmp_path), json_path=str(mine)) == 1
    assert json.loads(mine.read_text()) == {"verdict": "crash"}


def test_a_leader_without_a_report_is_said_and_no_file_is_written(tmp_path: Path) -> None:
    with pytest.raises(SystemExit), leader.per_node(TWO, tmp=str(tmp_path)):
        sys.exit(4)  # it ended before it had a report (a usage error, say)
    lines: list[str] = []
    mine = tmp_path / "task1.json"
    step = slurm_step(dict(TWO, SLURM_LOCALID="1"))
    assert step is not None and leader.follow(step, say=lines.append, tmp=str(tmp_path), json_path=str(mine)) == 4
    assert not mine.exists() and "task 0 wrote no report of the job" in lines[-1]


def test_a_node_alone_or_a_follower_publishes_nothing(tmp_path: Path) -> None:
    called: list[int] = []
    leader.publish_report(lambda: called.append(1) or "{}", ENV, tmp=str(tmp_path))  # one task a node
    leader.publish_report(lambda: called.append(1) or "{}", dict(TWO, SLURM_LOCALID="1"), tmp=str(tmp_path))
    assert called == [] and not list(tmp_path.rglob("*.report"))
