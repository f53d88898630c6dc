"""deadlock.detect on hand-built runs that ended: no finding for a healthy run or one a real exception
explains; otherwise the hang named with its culprit ranks and lines (an extra collective, an early exit,
uneven batches, a receive cycle, a transport stall, a rank cut short with fewer steps)."""

from __future__ import annotations

import json

from builder import RunBuilder, pending

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.hang import deadlock
from ddpdoctor.record.reader import load_run

CFG = Config(timeout=10.0)


def _detect(b: RunBuilder):
    return deadlock.detect(load_run(str(b.root)), CFG)


def _verdict(b: RunBuilder, mode: str = "certain", t: float = 5.0) -> RunBuilder:
    return b.add(None, "monitor.jsonl", "verdict", t, mode=mode, reason="x")


def _two(tmp_path, calls: int = 3) -> RunBuilder:
    b = RunBuilder(tmp_path / "run").start(0).start(1)
    for s in range(1, calls + 1):
        b.coll(0, s, 20).coll(1, s, 20)
    return b


def _roles(f) -> set[tuple[int, int, str]]:
    return {(l.rank, l.line, l.role) for l in f.locations}


def test_a_run_whose_ranks_finished_together_has_no_hang(tmp_path):
    b = _two(tmp_path).finish(0, 3.0, seq=3).finish(1, 3.0, seq=3)
    b.add(None, "monitor.jsonl", "exit", 4.0, returncode=0)
    assert _detect(b) == []


def test_a_real_exception_is_left_to_the_crash_detector(tmp_path):
    b = _two(tmp_path).hb(0, 2.1, 4, pending("all_reduce", 4, 20, 2.0)).finish(1, 2.0, code=1, exception=True)
    (b.root / "ranks" / "1" / "error.json").write_text(
        json.dumps({"type": "ValueError", "message": "nan", "frames": [], "user_frame": ["/work/train.py", 21, "m"]})
    )
    assert _detect(_verdict(b)) == []


def test_an_extra_call_on_one_rank_is_rank_conditional_with_that_rank_and_line(tmp_path):
    b = _two(tmp_path)
    b.coll(0, 4, 22).coll(0, 5, 20).coll(1, 4, 20)
    p = pending("all_reduce", 6, 20, 2.0)
    b.hb(0, 2.1, 6, p).hb(0, 5.0, 6, p)
    q = pending("barrier", 5, 30, 2.0, ())
    b.hb(1, 2.1, 5, q).hb(1, 5.0, 5, q)
    (f,) = _detect(_verdict(b))
    assert f.id == "hang.rank-conditional-collective" and f.culprits == (0,), f.message
    assert (0, 22, "diverged") in _roles(f)
    assert "first divergence at collective #4 of group 0" in f.message


def test_a_rank_that_finished_while_the_other_waits_exited_early(tmp_path):
    b = _two(tmp_path).finish(1, 2.0, seq=3)
    p = pending("all_reduce", 4, 20, 2.0)
    b.hb(0, 2.1, 4, p).hb(0, 5.0, 4, p)
    (f,) = _detect(_verdict(b))
    assert f.id == "hang.early-exit" and f.culprits == (1,), f.message
    assert (0, 20, "waiting") in _roles(f)
    assert (1, 20, "exited after its last collective here") in _roles(f)


def test_ranks_that_all_wait_to_receive_are_a_p2p_deadlock(tmp_path):
    b = RunBuilder(tmp_path / "run").start(0).start(1)
    for r, line in ((0, 40), (1, 41)):
        p = dict(pending("recv", 1, line, 2.0, ()), peer=1 - r)
        b.hb(r, 2.1, 1, p, where=line).hb(r, 5.0, 1, p, where=line)
    (f,) = _detect(_verdict(b, "timeout"))
    assert f.id == "hang.p2p-deadlock" and f.culprits == (0, 1), f.message
    assert "every rank waits to receive and none sends" in f.message and "from rank 1" in f.message
    assert {(0, 40, "waiting"), (1, 41, "waiting")} <= _roles(f)


def test_every_rank_in_the_same_collective_past_the_timeout_is_a_transport_stall(tmp_path):
    b = _two(tmp_path)
    p = pending("all_reduce", 4, 20, 2.0)
    for r in (0, 1):
        b.hb(r, 2.1, 4, p, where=20).hb(r, 13.0, 4, p, where=20)
    (f,) = _detect(_verdict(b, "timeout", 13.0))
    assert f.id == "hang.transport-stall" and "all ranks inside the same all_reduce (#4) for over 10 s" in f.message


def test_a_rank_with_fewer_steps_that_finished_while_torchrun_cut_the_other_short(tmp_path):
    b = RunBuilder(tmp_path / "run").start(0).start(1)
    b.finish(0, 2.0, seq=0)  # 3 DDP forwards
    b.hb(1, 1.0, 0, step=5, where=33).hb(1, 2.5, 0, step=6, where=33)
    b.add(None, "monitor.jsonl", "exit", 3.0, returncode=1)
    (f,) = _detect(b)
    assert f.id == "hang.early-exit" and f.culprits == (0,), f.message
    assert "finished after fewer DDP steps" in f.message and (1, 33, "went on") in _roles(f)


def test_ranks_whose_dataloaders_differ_in_length_ran_uneven_batches(tmp_path):
    b = _two(tmp_path)
    for r, n in ((0, 5), (1, 4)):
        b.add(r, "events.jsonl", "dataloader", 0.5, len=n)
    b.hb(0, 2.1, 3, step=5, in_backward=True, where=25).hb(0, 5.0, 3, step=5, in_backward=True, where=25)
    q = pending("barrier", 4, 30, 2.0, ())
    b.hb(1, 2.1, 4, q, step=4).hb(1, 5.0, 4, q, step=4)
    (f,) = _detect(_verdict(b, "timeout"))
    assert f.id == "hang.uneven-batches" and f.culprits == (1,), f.message
    assert "rank 0 ran 5 forward passes, rank 1 ran 4" in f.message and "DataLoader lengths" in f.message
    assert f.evidence["ddp_forwards"] == {0: 5, 1: 4}


LOOP_SCRIPT = """\
import torch.distributed as dist


def train(rank, loader, x):
    for batch in loader:
        dist.all_reduce(x)
        if rank == 1 and x.sum() > 0:
            break
    dist.barrier()


def main(rank, loader, x):
    train(rank, loader, x)
"""
LOOP, IN_LOOP, RANK_BREAK, AFTER, CALL = 5, 6, 8, 9, 13


def test_a_rank_that_left_the_loop_the_other_is_still_in_exited_early_at_its_break(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(LOOP_SCRIPT)
    b = RunBuilder(tmp_path / "run", script=str(script)).start(0).start(1)

    def site(line: int, fn: str = "train") -> list:
        return [str(script), line, fn]

    for s in range(1, 4):
        for r in (0, 1):
            b.add(r, "ledger.jsonl", "coll", 1.0, op="all_reduce", group="0", seq=[s, s], shapes=[[4]],
                  dtypes=["float32"], site=site(IN_LOOP), t0=1.0, t1=1.0, err=None)  # fmt: skip
    for r, (op, line) in {0: ("all_reduce", IN_LOOP), 1: ("barrier", AFTER)}.items():
        p = dict(pending(op, 4, line, 2.0, () if op == "barrier" else ((4,),)), site=site(line))
        b.hb(r, 2.1, 4, p).hb(r, 5.0, 4, p)
        stack = [site(CALL, "main"), site(line)]
        b.add(r, "stacks.jsonl", "stacks", 5.0, threads=[{"main": True, "stack": stack}])
    (f,) = _detect(_verdict(b))
    assert f.id == "hang.early-exit" and f.culprits == (1,), f.message
    assert f.message.startswith(f"rank 1 left the loop at train.py:{LOOP} early"), f.message
    assert "wait in barrier at train.py:9" in f.message and "rank 0 went on" in f.message
    assert (1, RANK_BREAK, "left the loop here") in _roles(f)
    assert (1, LOOP, "the loop it left") in _roles(f) and (0, IN_LOOP, "waiting") in _roles(f)
