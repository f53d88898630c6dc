"""A rank's flight record (torch's dump shape, as JSON) read as ledger entries (record/flight.py): positions
in the group's own numbering, dtypes in torch's names, the user's frame as the line, completion from the
group's status, the wrappers' entries winning at the same position, and a damaged file said, not raised."""

from __future__ import annotations

import json

from builder import RunBuilder

from ddpdoctor.record import flight
from ddpdoctor.record.reader import load_run

LIB = "/usr/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def _entry(
    op_id: int, op: str = "all_reduce", line: int = 7, pg: str = "0", sizes=((4,),), frames: bool = True
) -> dict:
    e = {
        "record_id": op_id,
        "pg_id": int(pg),
        "process_group": [pg, "default_pg"],
        "collective_seq_id": op_id,
        "p2p_seq_id": 0,
        "op_id": op_id,
        "profiling_name": f"gloo:{op}",
        "time_created_ns": 1_000_000_000 * op_id,
        "input_sizes": [list(s) for s in sizes],
        "input_dtypes": ["Float"],
        "state": "scheduled",
        "is_p2p": False,
    }
    if frames:
        e["frames"] = [
            {"name": op, "filename": LIB, "line": 3000},
            {"name": "forward", "filename": "/work/train.py", "line": line},
        ]
    return e


def _dump(entries: list, done: int) -> dict:
    return {
        "version": "2.10",
        "pg_config": {},
        "pg_status": {"0": {"last_enqueued_collective": len(entries), "last_completed_collective": done}},
        "entries": entries,
    }


def test_entries_take_positions_dtypes_lines_and_completion_from_the_dump():
    es = flight.entries(_dump([_entry(1), _entry(2, "all_gather", 9)], done=1), rank=1)
    assert [(e["op"], e["seq"], e["st"]) for e in es] == [
        ("all_reduce", [1, 1], "done"),
        ("all_gather", [2, 2], "issued"),
    ]
    assert es[1]["site"] == ["/work/train.py", 9, "forward"]  # the innermost user frame, not torch's
    assert es[0]["dtypes"] == ["float32"] and es[0]["rank"] == 1 and es[0]["src"] == "flight"


def test_a_dump_without_frames_keeps_the_calls_without_lines():
    es = flight.entries(_dump([_entry(1, frames=False)], done=1), rank=0)
    assert es[0]["site"] is None and es[0]["op"] == "all_reduce"


def test_nccl_positions_count_collectives_and_p2p_entries_are_left_to_the_wrappers():
    e = dict(_entry(3), profiling_name="nccl:all_reduce", collective_seq_id=2)
    p2p = dict(_entry(4), is_p2p=True)
    es = flight.entries(_dump([e, p2p], done=0), rank=0)
    assert [x["seq"] for x in es] == [[2, 2]]


def test_the_wrappers_entry_wins_at_the_same_position_and_the_rest_is_in_issue_order():
    ledger = [{"kind": "coll", "op": "all_reduce", "group": "0", "seq": [2, 2], "t0": 2.0, "site": ["/w.py", 1, "f"]}]
    fl = flight.entries(_dump([_entry(1), _entry(2), _entry(3)], done=3), rank=0)
    merged = flight.merge(ledger, fl)
    assert [e["seq"][0] for e in merged] == [1, 2, 3]
    assert merged[1] is ledger[0]


def test_the_reader_merges_flight_json_and_names_a_damaged_one(tmp_path):
    b = RunBuilder(tmp_path / "run")
    b.start(0)
    b.coll(0, 2, 5, t=2.0)
    d = tmp_path / "run" / "ranks" / "0"
    (d / "flight.json").write_text(json.dumps(dict(_dump([_entry(1), _entry(3)], done=3), ddpdoctor={"rank": 0})))
    rec = load_run(str(tmp_path / "run"))
    assert [e["seq"][0] for e in rec.ranks[0].ledger] == [1, 2, 3]
    assert rec.ranks[0].flight == {"rank": 0}
    (d / "flight.json").write_text('{"entries": [')
    from ddpdoctor.record.reader import RunReader

    reader = RunReader(str(tmp_path / "run"))
    rec = reader.refresh()
    assert [e["seq"][0] for e in rec.ranks[0].ledger] == [2]
    assert "ranks/0/flight.json" in reader.cut_files()


def test_the_site_is_the_users_call_into_torch_distributed_not_a_frame_inside_it() -> None:
    """A library that patches the process group's methods (the NCCL simulation of tests/ncclsim does) puts a frame
    of its own inside the collective's call; torch's elastic ``@record`` puts one of torch.distributed's outside
    it. The site is the user's frame that called the collective: line 31 of train.py, not the patch's line 91."""
    from ddpdoctor.record.flight import user_frame

    site_packages = "/venv/lib/python3.11/site-packages/torch/distributed"
    frames = [
        {"filename": "/work/patches/sitecustomize.py", "line": 91, "name": "method"},
        {"filename": f"{site_packages}/distributed_c10d.py", "line": 3245, "name": "all_reduce"},
        {"filename": f"{site_packages}/c10d_logger.py", "line": 83, "name": "wrapper"},
        {"filename": "/work/train.py", "line": 31, "name": "main"},
        {"filename": f"{site_packages}/elastic/multiprocessing/errors/__init__.py", "line": 367, "name": "wrapper"},
        {"filename": "/work/train.py", "line": 40, "name": "<module>"},
    ]
    assert user_frame(frames) == ["/work/train.py", 31, "main"]
    # a stack with no torch.distributed frame (a hand-made record): the innermost user frame, as before
    assert user_frame(frames[:1]) == ["/work/patches/sitecustomize.py", 91, "method"]


def test_a_bucket_all_reduce_autograd_issued_reads_as_ddps_internal_call_and_a_users_call_does_not(tmp_path) -> None:
    """DDP's reducer all-reduces its buckets from autograd's engine, in C++: the recorded stack has autograd's
    frames and no torch.distributed function. Such an entry is marked ``by: autograd``, and the judge's
    sequence reads it as DDP's internal call, as the wrappers' ledger (which never sees it) does. An FSDP call
    or the user's own all_reduce in backward goes through torch.distributed's functions and is not marked."""
    from ddpdoctor.analysis.hang.divergence import INTERNAL, sequence

    torch_dir = "/venv/lib/python3.11/site-packages/torch"
    bucket = _entry(2, line=29)
    bucket["frames"] = [
        {"filename": f"{torch_dir}/autograd/graph.py", "line": 979, "name": "_engine_run_backward"},
        {"filename": f"{torch_dir}/autograd/__init__.py", "line": 395, "name": "backward"},
        {"filename": f"{torch_dir}/_tensor.py", "line": 623, "name": "backward"},
        {"filename": "/work/train.py", "line": 29, "name": "main"},
    ]
    hook = _entry(3, line=29)  # a user's all_reduce called from a backward hook: torch.distributed on the way
    hook["frames"] = [
        {"filename": LIB, "line": 3000, "name": "all_reduce"},
        {"filename": "/work/train.py", "line": 12, "name": "hook"},
        *bucket["frames"],
    ]
    dump = _dump([_entry(1), bucket, hook], done=3)
    assert [e.get("by") for e in flight.entries(dump, rank=0)] == [None, "autograd", None]
    RunBuilder(tmp_path / "run").start(0)
    (tmp_path / "run" / "ranks" / "0" / "flight.json").write_text(json.dumps(dict(dump, ddpdoctor={"rank": 0})))
    rec = load_run(str(tmp_path / "run"))
    slots = sequence(rec, 0, "0", 3)
    assert slots[2].op == INTERNAL
    assert (slots[1].op, slots[3].op, slots[3].site[1]) == ("all_reduce", "all_reduce", 12)
