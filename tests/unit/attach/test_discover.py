"""Finding DDP jobs from outside (attach/discover.py), on a fake process table: torchrun ranks grouped
by their agent with the script named, DataLoader workers not taken for ranks, mp.spawn children numbered
in start order, other users' processes ignored, a pid selecting its job, and missing local ranks."""

from __future__ import annotations

import contextlib
import os
from types import SimpleNamespace

import psutil
import pytest

from ddpdoctor.attach import discover
from ddpdoctor.attach.discover import Job, RankProc, _is_spawn_child, find_jobs, script_of

ME = os.getuid()


class FakeProc:
    def __init__(self, pid, ppid, cmd, env=None, t=0.0, uid=ME, cwd="/work") -> None:
        self.pid, self._ppid, self._cmd, self._env, self._t, self._uid, self._cwd = pid, ppid, cmd, env, t, uid, cwd

    def uids(self):
        return SimpleNamespace(real=self._uid)

    def environ(self):
        if self._env is None:
            raise psutil.AccessDenied(self.pid)
        return self._env

    def ppid(self):
        return self._ppid

    def oneshot(self):
        return contextlib.nullcontext()

    def cmdline(self):
        return self._cmd

    def cwd(self):
        return self._cwd

    def create_time(self):
        return self._t


def _rank_env(rank: int, local: int, world: int = 4, local_world: int = 2) -> dict[str, str]:
    return {"RANK": str(rank), "LOCAL_RANK": str(local), "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(local_world), "MASTER_ADDR": "n0", "MASTER_PORT": "29500", "SECRET": "x"}  # fmt: skip


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch):
    procs: list[FakeProc] = []
    monkeypatch.setattr(discover.psutil, "process_iter", lambda: list(procs))
    return procs


def test_script_of_a_python_command_line() -> None:
    assert script_of(["python", "-u", "-X", "dev", "train.py", "--lr", "1"], "/work") == "/work/train.py"
    assert script_of(["python", "-m", "torch.distributed.run"], "/work") is None
    assert _is_spawn_child(["python", "-c", "from multiprocessing.spawn import spawn_main", "--multiprocessing-fork"])


def test_torchrun_ranks_are_grouped_by_their_agent_and_workers_are_not_ranks(table) -> None:
    table += [
        FakeProc(100, 1, ["python", "-m", "torch.distributed.run", "--nproc-per-node", "2", "train.py"], {}),
        FakeProc(102, 100, ["python", "-u", "train.py"], _rank_env(3, 1), t=2.0),
        FakeProc(101, 100, ["python", "-u", "train.py"], _rank_env(2, 0), t=1.0),
        FakeProc(103, 101, ["python", "-u", "train.py"], _rank_env(2, 0), t=3.0),  # rank 2's DataLoader worker
        FakeProc(200, 1, ["python", "other.py"], _rank_env(0, 0), uid=ME + 1),  # another user's
        FakeProc(300, 1, ["python", "x.py"], None),  # unreadable environment
    ]
    (job,) = find_jobs()
    assert job.kind == "torchrun" and job.launcher == 100 and job.key == "torchrun:100"
    assert [(r.pid, r.rank, r.local_rank) for r in job.ranks] == [(101, 2, 0), (102, 3, 1)]
    assert job.world_size == 4 and job.local_world_size == 2 and job.script == "/work/train.py"
    assert "SECRET" not in job.ranks[0].env and job.ranks[0].env["MASTER_PORT"] == "29500"
    assert job.missing_local() == []
    assert find_jobs(pid=102) == [job] and find_jobs(pid=100) == [job] and find_jobs(pid=999) == []


def test_mp_spawn_children_are_ranks_in_start_order(table) -> None:
    fork = ["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()", "--multiprocessing-fork"]
    table += [
        FakeProc(500, 1, ["python", "spawn_train.py"], {}),
        FakeProc(502, 500, fork, {"MASTER_PORT": "1234"}, t=5.0),
        FakeProc(501, 500, fork, {}, t=6.0),
        FakeProc(503, 502, fork, {}, t=7.0),  # a spawned DataLoader worker of a rank
    ]
    (job,) = find_jobs()
    assert job.kind == "spawn" and job.launcher == 500 and job.script == "/work/spawn_train.py"
    assert [(r.pid, r.rank) for r in job.ranks] == [(502, 0), (501, 1)] and job.world_size == 2
    assert job.ranks[0].env == {"MASTER_PORT": "1234"}


def test_missing_local_ranks_of_a_torchrun_node() -> None:
    r = RankProc(11, rank=5, local_rank=1, world_size=8, cmdline=[], cwd="/", create_time=0.0)
    job = Job("torchrun", 10, [r], 8, 4, None, "torchrun:10")
    assert job.missing_local() == [4, 6, 7]
    assert Job("spawn", 10, [r], 8, 4, None, "spawn:10").missing_local() == []
