"""Multi-node options from a launcher's environment (launch/launchers.py): SLURM node lists expanded in
order (bad ones refused), a SLURM allocation giving the rendezvous, a PyTorchJob's PET_* and
MASTER_ADDR/WORLD_SIZE variables, and the user's own options always winning."""

from __future__ import annotations

import pytest

from ddpdoctor.launch.launchers import NodeListError, expand_nodelist, from_environment, max_nodes

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
        "rdzv_endpoint": "gpu07:29500",
        "rdzv_id": "4242",
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
