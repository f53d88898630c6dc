"""Multi-node options from a launcher's environment (launch/launchers.py): SLURM node lists expanded in
order (bad ones refused), a SLURM allocation giving the rendezvous, a PyTorchJob's PET_* and
MASTER_ADDR/WORLD_SIZE variables, and the user's own options always winning."""

from __future__ import annotations

import pytest

from ddpdoctor.launch.launchers import (
    PORT_BASE,
    PORT_SLOTS,
    NodeListError,
    default_nproc,
    expand_nodelist,
    from_environment,
    max_nodes,
    slurm_step,
    step_port_conflict,
    step_ports,
)

SLURM = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_NNODES": "2", "SLURM_NODEID": "1"}


@pytest.mark.parametrize(
    "text, hosts",
    [
        ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
        ("a1,b[2-3]", ["a1", "b2", "b3"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("solo", ["solo"]),
    ],
)
def test_node_lists_expand_in_order(text: str, hosts: list[str]) -> None:
    assert expand_nodelist(text) == hosts


@pytest.mark.parametrize(
    "bad, why",
    [
        ("n[1-2", "unbalanced '\\['"),
        ("n1-2]", "unbalanced '\\]'"),
        ("n[3-1]", "descending"),
        ("n[a]", "bad range"),
        ("", "empty"),
    ],
)
def test_bad_node_lists_are_refused(bad: str, why: str) -> None:
    with pytest.raises(NodeListError, match=why):
        expand_nodelist(bad)


def test_a_slurm_allocation_gives_the_rendezvous() -> None:
    out, source = from_environment({"nproc_per_node": "4"}, SLURM)
    assert source == "SLURM"
    assert out == {
        "nproc_per_node": "4",
        "nnodes": "2",
        "rdzv_backend": "c10d",
        "rdzv_endpoint": f"gpu07:{step_ports('4242', '0')[0]}",
        "rdzv_id": "4242.0",
    }


def test_with_a_master_address_slurm_gives_the_static_node_rank() -> None:
    out, source = from_environment({"master_addr": "gpu07", "master_port": 1234}, SLURM)
    assert source == "SLURM" and out["nnodes"] == "2" and out["node_rank"] == 1 and "rdzv_endpoint" not in out


def test_a_one_node_allocation_and_a_complete_command_line_add_nothing() -> None:
    assert from_environment({}, dict(SLURM, SLURM_JOB_NODELIST="gpu07", SLURM_NNODES="1")) == ({}, None)
    opts = {"nnodes": "2", "rdzv_endpoint": "h:1", "rdzv_backend": "c10d"}
    assert from_environment(opts, SLURM) == (opts, None)


def test_pytorchjob_variables() -> None:
    out, source = from_environment(
        {"nnodes": "3"}, {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_PORT": "23456"}
    )
    assert source == "PET_*" and out == {"nnodes": "3", "node_rank": 1, "master_port": 23456}
    env = {"WORLD_SIZE": "4", "RANK": "2", "MASTER_ADDR": "pod-0", "MASTER_PORT": "29500"}
    out, source = from_environment({}, env)
    assert source == "MASTER_ADDR/WORLD_SIZE"
    assert out == {"nnodes": "4", "node_rank": 2, "master_addr": "pod-0", "master_port": 29500}
    assert from_environment({}, dict(env, LOCAL_RANK="0")) == ({}, None)  # inside torchrun's own worker


def test_max_nodes() -> None:
    assert [max_nodes(x) for x in (None, "2", "1:4", "x", 0)] == [1, 2, 4, 1, 1]


# srun -N2 inside an allocation of n[0-2]: the step runs on n[1-2] (issue 35)
STEP = {
    "SLURM_JOB_ID": "77",
    "SLURM_JOB_NODELIST": "n[0-2]",
    "SLURM_NNODES": "3",
    "SLURM_JOB_NUM_NODES": "3",
    "SLURM_STEP_ID": "3",
    "SLURM_STEP_NODELIST": "n[1-2]",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_NODEID": "1",
    "SLURMD_NODENAME": "n2",
    "SLURM_LOCALID": "0",
}


def test_a_job_is_its_step_the_steps_nodes_its_id_and_its_ports() -> None:
    out, source = from_environment({}, STEP)
    rdzv, store = step_ports("77", "3")
    assert source == "SLURM" and store == rdzv + 1
    assert out == {"nnodes": "2", "rdzv_backend": "c10d", "rdzv_endpoint": f"n1:{rdzv}", "rdzv_id": "77.3"}
    step = slurm_step(STEP)
    assert step is not None and step.hosts == ("n1", "n2") and step.node == 1 and step.id == "77.3"
    # static rendezvous: the node rank is the node's place in the step, not in the allocation
    assert from_environment({"master_addr": "n1"}, dict(STEP, SLURM_NODEID="2"))[0]["node_rank"] == 1


def test_two_jobs_or_two_steps_never_share_their_ports() -> None:
    ports = {step_ports(str(job), str(step))[0] for job in range(1000, 1200) for step in range(16)}
    assert len(ports) == 200 * 16  # consecutive jobs with up to 16 steps each: all apart
    assert all(PORT_BASE <= p < PORT_BASE + 2 * PORT_SLOTS and p % 2 == 0 for p in ports)
    assert step_ports("123+1", "0") == step_ports("123+1", "0")  # a heterogeneous job's id: stable
    assert from_environment({}, dict(STEP, MASTER_PORT="31000"))[0]["rdzv_endpoint"] == "n1:31000"


def test_the_first_node_checks_the_steps_ports_before_starting(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen(1)
        taken = s.getsockname()[1]
        env = dict(STEP, SLURMD_NODENAME="n1", MASTER_PORT=str(taken))
        opts = from_environment({}, env)[0]
        msg = step_port_conflict(opts, env)
        assert msg is not None and f"port {taken} on n1" in msg and "77.3" in msg and "MASTER_PORT" in msg
        assert step_port_conflict(opts, STEP) is None  # node 1 of the step does not serve it: no check
        env1 = dict(env, MASTER_PORT=str(taken - 1))  # the job store port (the next one) is taken
        if step_port_conflict(from_environment({}, env1)[0], env1) is not None:
            assert "job store" in str(step_port_conflict(from_environment({}, env1)[0], env1))


def test_nproc_defaults_to_the_steps_gpus() -> None:
    assert default_nproc(dict(STEP, SLURM_GPUS_ON_NODE="4", CUDA_VISIBLE_DEVICES="0")) == "4"
    assert default_nproc({"CUDA_VISIBLE_DEVICES": "0,1,2"}) == "3"
    assert default_nproc({"CUDA_VISIBLE_DEVICES": ""}) is None and default_nproc({}) is None


def test_the_tasks_on_a_node_from_slurms_compressed_form():
    from ddpdoctor.launch.launchers import tasks_on_node

    assert [tasks_on_node("2(x3),1", n) for n in range(5)] == [2, 2, 2, 1, None]
    assert tasks_on_node("4", 0) == 4 and tasks_on_node("", 0) is None and tasks_on_node("x", 0) is None


def test_two_tasks_a_node_give_a_rank_each_by_default_and_fewer_are_said():
    from ddpdoctor.launch.launchers import default_nproc, tasks_line

    env = {
        "SLURM_JOB_ID": "7",
        "SLURM_STEP_ID": "0",
        "SLURM_STEP_NODELIST": "n[0-1]",
        "SLURMD_NODENAME": "n1",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    }
    assert default_nproc(env) == "2"
    assert tasks_line("2", env) is None
    line = tasks_line("1", env)
    assert line is not None and "job step 7.0 has 2 tasks on n1" in line and "--nproc-per-node 2" in line
    assert default_nproc(dict(env, SLURM_GPUS_ON_NODE="4")) == "4"  # the GPUs first, as before
    assert tasks_line("1", dict(env, SLURM_STEP_TASKS_PER_NODE="1(x2)")) is None
