"""torch's flight recorder read inside a rank (rank/flight.py), in a world of one gloo rank in the test
process: each group's position from its status, every entry with its frames in flight.json (torch's dump
shape, as JSON) that record/flight.py reads back at the caller's line, and the fallbacks said: a recorder
switched off, a torch without the bindings."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from ddpdoctor.rank import flight
from ddpdoctor.record import flight as record_flight

HERE = Path(__file__).resolve()


def line_of(marker: str) -> int:
    for i, text in enumerate(HERE.read_text().splitlines(), 1):
        if text.rstrip().endswith(f"# {marker}"):
            return i
    raise AssertionError(marker)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[Any]:
    assert not dist.is_initialized()
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=20))
    try:
        yield dist.distributed_c10d._get_default_group()
    finally:
        dist.destroy_process_group()


def test_status_positions_and_a_dump_with_frames_read_back_at_the_callers_line(world: Any, tmp_path: Path) -> None:
    rec = flight.Recorder(env={})
    assert rec.on, rec.off_reason
    t = torch.ones(3)
    dist.all_reduce(t)  # CALL
    # gloo marks the call completed from its own thread, a moment after it returned here (bounded wait)
    deadline = time.monotonic() + 10
    # (every group's: torch keeps the status of groups an earlier test in this process made, already completed)
    while not (st := rec.status()) or not all(done >= enq for enq, done in st.values()):
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
    status = rec.status()
    assert status, "the recorder has no group status"
    name = world.group_name
    assert rec.positions(status)[name] == world._get_sequence_number_for_group()  # one numbering
    path = tmp_path / "flight.json"
    assert rec.write(str(path), rank=0, reason="end")
    dump = json.loads(path.read_text())
    assert {"version", "pg_status", "entries"} <= dump.keys() and dump["ddpdoctor"]["reason"] == "end"
    mine = [
        e for e in record_flight.entries(dump, 0, (str(HERE.parent) + "/",)) if e["site"] and e["site"][0] == str(HERE)
    ]
    assert mine and mine[-1]["site"][1] == line_of("CALL") and mine[-1]["op"] == "all_reduce"
    assert mine[-1]["group"] == name and mine[-1]["st"] == "done" and mine[-1]["dtypes"] == ["float32"]


def test_a_recorder_switched_off_is_said_and_read_as_nothing() -> None:
    rec = flight.Recorder(env={"TORCH_FR_BUFFER_SIZE": "0"})
    assert not rec.on and "TORCH_FR_BUFFER_SIZE='0'" in rec.off_reason
    assert rec.status() == {} and rec.dump() is None
    assert flight.buffer_size({"TORCH_NCCL_TRACE_BUFFER_SIZE": "50"}) == 50  # torch's older name, read too
    assert flight.buffer_size({}) == flight.DEFAULT_BUFFER


def test_a_torch_without_the_bindings_leaves_the_rank_to_the_wrappers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flight, "_sources", lambda: [])
    rec = flight.Recorder(env={})
    assert not rec.on and "no flight-recorder bindings" in rec.off_reason
    assert rec.status() == {}
    assert rec.pending({"0": (3, 2)}, None) is None and rec.pending({"0": (3, 2)}, None) is None  # no entry to read


def _gloo_calls(t: torch.Tensor) -> dict[str, Any]:
    """One call of each collective the table says gloo's recorder records, runnable in a world of one."""
    return {
        "all_reduce": lambda: dist.all_reduce(t),
        "broadcast": lambda: dist.broadcast(t, 0),
        "reduce": lambda: dist.reduce(t, 0),
        "all_gather": lambda: dist.all_gather([torch.zeros(3)], t),
        "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(torch.zeros(3), t),
        "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(torch.zeros(3), t),
        "gather": lambda: dist.gather(t, [torch.zeros(3)], 0),
        "scatter": lambda: dist.scatter(torch.zeros(3), [t], 0),
        "all_to_all_single": lambda: dist.all_to_all_single(torch.zeros(3), t),
        "barrier": lambda: dist.barrier(),
        "all_gather_object": lambda: dist.all_gather_object([None], {"a": 1}),
        "broadcast_object_list": lambda: dist.broadcast_object_list([1], 0),
    }


def _enqueued(rec: flight.Recorder) -> int:
    return sum(enq for enq, _done in rec.status().values())


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch 2.13 deprecates two of the names the table holds
def test_every_op_the_table_says_gloo_records_is_in_the_recorder(world: Any) -> None:
    rec = flight.Recorder(env={})
    ops = rec.recorded_ops("gloo")
    assert "send" not in ops and "monitored_barrier" not in ops and "all_reduce" in ops
    assert rec.recorded_ops("undefined") == ops  # init_device_mesh's group: torch's per-device defaults
    assert rec.recorded_ops("mpi") == frozenset()
    assert flight.Recorder(env={"TORCH_FR_BUFFER_SIZE": "0"}).recorded_ops("gloo") == frozenset()
    t = torch.ones(3)
    for op, call in _gloo_calls(t).items():
        assert op in ops
        before = _enqueued(rec)
        call()
        assert _enqueued(rec) > before, f"{op} left no entry in gloo's recorder"


def test_hand_off_gives_the_recorded_ops_back_to_torch_and_keeps_the_others_wrapped(world: Any) -> None:
    from ddpdoctor.rank import collectives

    saved = {op: getattr(dist, op) for op in collectives.WRAPPED if hasattr(dist, op)}
    originals = {op: getattr(fn, "__ddpdoctor_wrapped__", fn) for op, fn in saved.items()}
    try:
        collectives.install(dist)
        collectives.hand_off(dist, flight.Recorder(env={}).recorded_ops("gloo"))
        assert dist.all_reduce is originals["all_reduce"]  # torch's own function: no Python of ours per call
        assert getattr(dist.send, "__ddpdoctor_wrapped__", None) is originals["send"]  # gloo records no p2p
        assert dist.distributed_c10d.isend is dist.isend  # torch's P2POp identity check still holds
        collectives.hand_off(dist, frozenset())
        assert getattr(dist.all_reduce, "__ddpdoctor_wrapped__", None) is originals["all_reduce"]
    finally:
        collectives.hand_off(dist, frozenset())
        for op, fn in saved.items():
            setattr(dist, op, fn)
        for op in ("isend", "irecv"):
            setattr(dist.distributed_c10d, op, originals[op])


def test_the_first_call_of_a_group_in_flight_is_the_pending_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # gloo's status says -1 completed before a group's first call returns: the call in flight is position 1
    rec = flight.Recorder(env={})
    entry = {"pg_id": 0, "profiling_name": "gloo:barrier", "op_id": 1, "input_sizes": [], "input_dtypes": []}
    monkeypatch.setattr(rec, "_entries", lambda: [("", entry)])
    rec.names["0"] = ["0", "default_pg"]
    monkeypatch.setattr(flight, "PENDING_AFTER", 0.0)
    status = {"0": (1, -1)}
    assert rec.pending(status, None) is None  # the first beat that sees it in flight starts its clock
    got = rec.pending(status, ["/w/train.py", 28, "main"])
    assert got is not None and (got["op"], got["seq"], got["group"]) == ("barrier", 1, "0"), got
    assert got["site"] == ["/w/train.py", 28, "main"] and got["source"] == "flight"


def test_when_the_monitor_asks_the_call_in_flight_is_read_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A verdict's beat (the monitor asked for the stacks) reads the call in flight without waiting PENDING_AFTER
    or READ_EVERY: a rank blocked in Work.wait() a moment before the verdict is among the report's blocked."""
    rec = flight.Recorder(env={})
    entry = {"pg_id": 0, "profiling_name": "gloo:all_reduce", "op_id": 7, "input_sizes": [[2]], "input_dtypes": []}
    monkeypatch.setattr(rec, "_entries", lambda: [("", entry)])
    rec.names["0"] = ["0", "default_pg"]
    monkeypatch.setattr(flight, "PENDING_AFTER", 60.0)
    status = {"0": (7, 6)}
    assert rec.pending(status, None) is None and rec.pending(status, None) is None  # in flight for under a minute
    got = rec.pending(status, None, asked=True)
    assert got is not None and (got["op"], got["seq"]) == ("all_reduce", 7), got


def test_a_dump_with_frames_does_not_import_inductor(world: Any) -> None:
    # torch's symbolizer asks hasattr(torch, "_inductor"), which torch's lazy __getattr__ answers by importing it
    # (seconds of CPU); the dump keeps that one name absent while it runs, and only then
    import sys

    if "torch._inductor" in sys.modules:
        pytest.skip("torch._inductor was imported by an earlier test in this process")
    lazy = torch.__dict__["__getattr__"]
    dist.all_reduce(torch.ones(2))
    dump = flight.Recorder(env={}).dump(True)
    assert dump is not None and dump["entries"][-1]["frames"], "no frames in the dump"
    assert "torch._inductor" not in sys.modules and torch.__dict__["__getattr__"] is lazy


def test_while_a_dump_reads_its_frames_another_threads_lookup_gets_torchs_own_answer(monkeypatch: Any) -> None:
    """The heartbeat now reads the ring with frames every half a ring of calls: the name kept absent for the
    symbolizer is absent to the dumping thread alone, never to the script's threads meanwhile. torch's lazy
    lookup is stood in for here, so that the other thread's answer imports nothing."""
    import sys
    import threading

    # the guard stands aside where torch._inductor is loaded (an earlier test of this worker may have): out of
    # sight for this test, which imports nothing
    monkeypatch.delitem(sys.modules, "torch._inductor", raising=False)
    monkeypatch.setitem(torch.__dict__, "__getattr__", lambda name: f"torch's answer for {name}")
    stand_in = torch.__dict__["__getattr__"]
    seen: dict[str, Any] = {}
    with flight._no_inductor_import():
        try:
            torch.__getattr__("_inductor")
        except AttributeError:
            seen["dumper"] = "absent"
        other = threading.Thread(target=lambda: seen.update(other=torch.__getattr__("_inductor")))
        other.start()
        other.join(timeout=10)
    assert seen == {"dumper": "absent", "other": "torch's answer for _inductor"}
    assert torch.__dict__["__getattr__"] is stand_in


def test_a_group_yet_to_make_its_first_op_hides_the_status_unless_the_main_thread_sits_in_a_call(world: Any) -> None:
    """A mesh job's default group makes no op until its final barrier. While a group has yet to make its first op
    the status is not read (torch 2.13 inserts that group's status unlocked at its first op: ``settled``), unless
    the caller says the main thread has sat in one torch.distributed call since the last beat (``blocked``: past
    the enqueue, no insertion can race the read); then every group's position is read."""
    rec = flight.Recorder(env={})
    dist.all_reduce(torch.ones(1))
    side = dist.new_group([0])  # made, never used: its sequence number stays 0
    assert side._get_sequence_number_for_group() == 0
    assert not rec.settled() and rec.status() == {}
    got = rec.status(blocked=True)
    assert got and rec.positions(got)[world.group_name] == world._get_sequence_number_for_group()
