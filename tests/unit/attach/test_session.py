"""The attach session's small judgements (attach/session.py): a job described in one line, and an mp.spawn
candidate confirmed only when a rank's stack runs torch.multiprocessing.spawn (torchrun jobs need no proof)."""

from __future__ import annotations

from ddpdoctor.attach.discover import Job, RankProc
from ddpdoctor.attach.dump import Dump
from ddpdoctor.attach.session import _confirmed, describe


def _job(kind: str) -> Job:
    ranks = [RankProc(p, i, i, 2, [], "/w", 0.0) for i, p in enumerate((101, 102))]
    return Job(kind, 100, ranks, 2, 2, "/w/train.py", f"{kind}:100")


def test_a_job_in_one_line() -> None:
    assert describe(_job("torchrun")) == "torchrun job train.py (launcher pid 100, 2 local rank(s) of 2: pids 101,102)"
    j = _job("spawn")
    j.script, j.world_size = None, None
    assert describe(j) == "spawn job ? (launcher pid 100, 2 local rank(s) of ?: pids 101,102)"


def test_a_spawn_candidate_needs_torchs_spawn_on_a_stack() -> None:
    spawn_stack = [
        {"main": True, "stack": [["/venv/lib/torch/multiprocessing/spawn.py", 75, "_wrap"], ["/w/train.py", 9, "run"]]}
    ]
    plain_stack = [{"main": True, "stack": [["/usr/lib/python3.11/multiprocessing/pool.py", 114, "worker"]]}]
    assert _confirmed(_job("spawn"), {101: Dump(101, spawn_stack)})
    assert not _confirmed(_job("spawn"), {101: Dump(101, plain_stack), 102: Dump(102, None, "failed")})
    assert _confirmed(_job("torchrun"), {})
