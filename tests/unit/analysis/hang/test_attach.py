"""`ddpdoctor attach`: real DDP jobs started WITHOUT ddpdoctor (plain torchrun, plain mp.spawn), hung in a
collective, diagnosed from py-spy stacks; the job keeps running unless --kill; nothing is left behind."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not os.access(os.path.join(os.path.dirname(sys.executable), "py-spy"), os.X_OK),
    reason="py-spy is not installed next to this Python",
)


# -- the detector on hand-built attach records (pure: no job, no py-spy) ----------------------------------

_SCRIPT = """import torch.distributed as dist
def main(rank, model, opt, data):
    for step in range(8):
        loss = model(data).sum()
        loss.backward()
        dist.all_reduce(loss)
        if rank == 1 and step == 2:
            break
    dist.barrier()
main(0, None, None, None)
"""
_TORCH = "/venv/lib/python3.11/site-packages/torch"
_BACKWARD = [[f"{_TORCH}/_tensor.py", 623, "backward"], [f"{_TORCH}/autograd/__init__.py", 395, "backward"]]
_BARRIER = [
    [f"{_TORCH}/distributed/c10d_logger.py", 83, "wrapper"],
    [f"{_TORCH}/distributed/distributed_c10d.py", 5356, "barrier"],
]
_ALLREDUCE = [
    [f"{_TORCH}/distributed/c10d_logger.py", 83, "wrapper"],
    [f"{_TORCH}/distributed/distributed_c10d.py", 3252, "all_reduce"],
]


def _record(
    tmp: Path,
    stacks: dict[int, tuple[int, list, bool]],
    gone: tuple[int, ...] = (),
    world: int = 2,
    source: str = _SCRIPT,
):
    from builder import RunBuilder

    from ddpdoctor.analysis import diagnose
    from ddpdoctor.analysis.config import Config
    from ddpdoctor.record.reader import load_run

    tmp.mkdir(parents=True, exist_ok=True)
    script = tmp / "train.py"
    script.write_text(source)
    b = RunBuilder(tmp / "run", script=str(script), command="attach", attach={"interval": 1.0})
    for r, (line, torch_frames, moved) in stacks.items():
        b.add(r, "events.jsonl", "start", 1.0, pid=1000 + r, local_rank=r)
        b.add(r, "events.jsonl", "init", 1.0, world_size=world)
        stack = [[str(script), 10, "<module>"], [str(script), line, "main"], *torch_frames]
        b.add(
            r,
            "stacks.jsonl",
            "stacks",
            2.0,
            threads=[{"main": True, "name": "MainThread", "stack": stack}],
            moved=moved,
            cpu=0.0,
        )
    for r in gone:
        b.add(r, "events.jsonl", "gone", 1.0, world_size=world)
    return diagnose(load_run(str(tmp / "run")), Config())


def test_detector_early_exit_from_stacks(tmp_path: Path) -> None:
    rep = _record(tmp_path, {0: (5, _BACKWARD, False), 1: (9, _BARRIER, False)})
    f = next(f for f in rep.findings if f.id == "hang.early-exit")
    assert f.culprits == (1,) and rep.exit_code == 3
    assert {l.line for l in f.locations if l.rank == 1} >= {8, 9}  # the break it took, where it waits


_ELSE_SCRIPT = """import torch.distributed as dist
def main(rank, model, opt, data):
    for step in range(8):
        dist.all_reduce(data)
        if rank == 0:
            print(step)
        else:
            dist.all_reduce(data)
    dist.barrier()
main(0, None, None, None)
"""


def test_detector_extra_call_in_the_else_branch_of_a_rank_test(tmp_path: Path) -> None:
    """Rank 1 all-reduces once more each step, in the ``else`` of ``if rank == 0:``: shifted, rank 0 has ended
    its loop and waits in the barrier while rank 1 waits in the loop's first call. The stacks read the rank
    test on the loop's calls as the ledger does (``paths.rank_test``: the ``else`` branch is the other ranks'):
    rank 1's extra call at line 8, not rank 0 leaving the loop early."""
    rep = _record(tmp_path, {0: (9, _BARRIER, False), 1: (4, _ALLREDUCE, False)}, source=_ELSE_SCRIPT)
    f = next(f for f in rep.findings if f.severity == "error")
    assert f.id == "hang.rank-conditional-collective" and f.culprits == (1,), f
    assert (1, 8, "diverged") in {(l.rank, l.line, l.role) for l in f.locations}


def test_detector_exited_rank(tmp_path: Path) -> None:
    rep = _record(tmp_path, {0: (5, _BACKWARD, False)}, gone=(1,))
    f = next(f for f in rep.findings if f.id == "hang.early-exit")
    assert f.culprits == (1,) and 8 in {l.line for l in f.locations if l.rank == 1}


def test_detector_same_collective_and_running(tmp_path: Path) -> None:
    rep = _record(tmp_path / "a", {0: (6, _ALLREDUCE, False), 1: (6, _ALLREDUCE, False)})
    assert [f.id for f in rep.findings if f.severity == "error"] == ["hang.transport-stall"]
    assert rep.findings[0].culprits == ()
    # the stacks hold no positions: a rank one call ahead at the same line (tests/frjobs/pipejob.py extra under
    # plain torchrun) looks the same, and the finding says so rather than ruling a divergence out
    assert "a rank one call ahead at the same line looks the same" in rep.findings[0].message
    assert "not a code divergence" not in rep.findings[0].message
    rep = _record(tmp_path / "b", {0: (6, _ALLREDUCE, False), 1: (6, _ALLREDUCE, False)}, world=4)
    assert rep.exit_code == 0 and any("other nodes" in f.message for f in rep.findings if f.id == "hang.timeout")
    rep = _record(tmp_path / "c", {0: (4, [], True), 1: (5, _BACKWARD, True)})
    assert [f.id for f in rep.findings] == ["attach.running"] and rep.exit_code == 0
