"""paths on a real script and hand-built stacks: the exits of the loop around a line, whether a diverged
rank left the loop (or returned from the call) its peer is still in, the rank test a collective sits
under, and the user frames of a rank's stack from the dump, the fatal signal or the exception."""

from __future__ import annotations

import json

from builder import RunBuilder

from ddpdoctor.analysis.hang import paths
from ddpdoctor.record.reader import load_run

SCRIPT = """\
import sys
import torch.distributed as dist


def train(rank, loader, x):
    for batch in loader:
        for micro in batch:
            if micro is None:
                break
            dist.all_reduce(x)
        if rank == 1 and x.sum() > 0:
            break
        if x.isnan().any():
            sys.exit(1)
    dist.barrier()
    return x


def main(rank, loader, x):
    train(rank, loader, x)
    dist.all_reduce(x)
"""
OUTER, INNER_BREAK, ALL_REDUCE, RANK_IF, RANK_BREAK, EXIT, BARRIER = 6, 9, 10, 11, 12, 14, 15
CALL_TRAIN, MAIN_ALL_REDUCE = 20, 21


def _run(tmp_path, stacks: dict[int, list[list]]):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    b = RunBuilder(tmp_path / "run", script=str(script)).start(0).start(1)
    for r, frames in stacks.items():
        dump = {"threads": [{"main": True, "stack": [[str(script), ln, fn] for ln, fn in frames]}]}
        b.add(r, "stacks.jsonl", "stacks", 5.0, **dump)
    return str(script), load_run(str(b.root))


def test_loop_exits_of_the_outer_loop_skip_the_inner_loops_break(tmp_path):
    script, _ = _run(tmp_path, {})
    assert paths.loop_exits(script, ALL_REDUCE) == (RANK_BREAK, EXIT)
    assert paths.loop_exits(script, ALL_REDUCE, every_loop=True) == (INNER_BREAK, RANK_BREAK, EXIT)
    assert paths.loop_exits(script, BARRIER) == ()  # not in a loop
    assert paths.loop_exits(str(tmp_path / "missing.py"), 3) == ()


def test_rank_guard_finds_the_rank_test_above_a_collective(tmp_path):
    script, record = _run(tmp_path, {})
    assert paths.rank_guard(record, 1, (script, RANK_BREAK, "train")) == (script, RANK_IF)
    assert paths.rank_guard(record, 1, (script, ALL_REDUCE, "train")) is None  # `if micro is None` is no rank test


def test_user_stack_reads_the_main_threads_dump_outermost_first(tmp_path):
    script, record = _run(tmp_path, {0: [(CALL_TRAIN, "main"), (ALL_REDUCE, "train")]})
    assert paths.user_stack(record, 0) == [(script, CALL_TRAIN, "main"), (script, ALL_REDUCE, "train")]
    assert paths.user_stack(record, 1) is None


def test_user_stack_falls_back_to_the_exceptions_frames(tmp_path):
    script, record = _run(tmp_path, {})
    frames = [["/usr/lib/python3.12/runpy.py", 88, "_run_code"], [script, CALL_TRAIN, "main"], [script, EXIT, "train"]]
    (tmp_path / "run" / "ranks" / "1" / "error.json").write_text(
        json.dumps({"type": "SystemExit", "message": "1", "frames": frames, "user_frame": frames[-1]})
    )
    record = load_run(str(tmp_path / "run"))
    assert paths.user_stack(record, 1) == [(script, CALL_TRAIN, "main"), (script, EXIT, "train")]


def test_a_rank_past_the_loop_its_peer_is_in_left_the_loop(tmp_path):
    _, record = _run(
        tmp_path, {1: [(CALL_TRAIN, "main"), (BARRIER, "train")], 0: [(CALL_TRAIN, "main"), (ALL_REDUCE, "train")]}
    )
    dep = paths.departure(record, 1, 0)
    assert dep is not None and (dep.how, dep.line, dep.func) == ("left the loop", OUTER, "train")
    assert dep.exits == (RANK_BREAK, EXIT)
    assert paths.departure(record, 0, 1) is None  # rank 0 is behind, inside the loop: it left nothing


def test_a_rank_that_returned_from_the_call_its_peer_is_inside_returned_from(tmp_path):
    _, record = _run(tmp_path, {1: [(MAIN_ALL_REDUCE, "main")], 0: [(CALL_TRAIN, "main"), (ALL_REDUCE, "train")]})
    dep = paths.departure(record, 1, 0)
    assert dep is not None and (dep.how, dep.line, dep.exits) == ("returned from", CALL_TRAIN, (RANK_BREAK, EXIT))


def test_two_lines_inside_the_same_loop_are_no_departure(tmp_path):
    _, record = _run(
        tmp_path, {1: [(CALL_TRAIN, "main"), (EXIT, "train")], 0: [(CALL_TRAIN, "main"), (ALL_REDUCE, "train")]}
    )
    assert paths.departure(record, 1, 0) is None


def test_passes_counts_the_dataloader_iterations(tmp_path):
    _, record = _run(tmp_path, {})
    assert paths.passes(record, 0) == 0
    b = tmp_path / "run" / "ranks" / "0" / "events.jsonl"
    with b.open("a") as f:
        for t in (1.0, 2.0):
            f.write(json.dumps({"v": 1, "kind": "dataloader", "rank": 0, "t": t, "len": 4}) + "\n")
    assert paths.passes(load_run(str(tmp_path / "run")), 0) == 2
