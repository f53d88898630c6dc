"""What ``attach`` saw written as a run directory (attach/record.py): per rank a start/init event, one
stack dump (with whether the main thread moved) and a heartbeat naming the collective and the user's
line; gone local ranks marked; the flight recorder's JSON dump read, a pickle only named; and the reader
loads the result."""

from __future__ import annotations

import json
from pathlib import Path

from ddpdoctor.attach.discover import Job, RankProc
from ddpdoctor.attach.dump import Dump
from ddpdoctor.attach.record import _user_site, flight_recorder, main_stack, write
from ddpdoctor.record.reader import load_run

C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
IN_ALL_REDUCE = [
    ["/work/train.py", 80, "<module>"],
    ["/work/train.py", 42, "main"],
    [C10D, 2500, "all_reduce"],
    [C10D, 2600, "_wait"],
]
AT_LINE_50 = [["/work/train.py", 80, "<module>"], ["/work/train.py", 50, "main"]]


def _threads(stack: list) -> list[dict]:
    return [{"main": True, "os_tid": 1, "stack": stack}, {"main": False, "os_tid": 2, "stack": [["t.py", 1, "run"]]}]


def test_main_stack_and_the_users_innermost_line() -> None:
    assert main_stack(_threads(IN_ALL_REDUCE)) == IN_ALL_REDUCE and main_stack(None) == []
    assert _user_site(IN_ALL_REDUCE, "/work/train.py") == ["/work/train.py", 42, "main"]
    assert _user_site([[C10D, 1, "barrier"]], None) is None


def test_the_flight_recorders_json_dump_is_read_and_a_pickle_only_named(tmp_path: Path) -> None:
    assert flight_recorder({}, 0) is None
    prefix = str(tmp_path / "fr_")
    assert flight_recorder({"TORCH_FR_DUMP_TEMP_FILE": prefix}, 3) == {"file": prefix + "3", "found": False}
    entries = [
        {"record_id": i, "profiling_name": "nccl:all_reduce", "state": "completed", "extra": 1} for i in range(40)
    ]
    (tmp_path / "fr_0").write_text(json.dumps({"entries": entries}))
    got = flight_recorder({"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix}, 0)
    assert got["format"] == "json" and len(got["entries"]) == 32 and got["entries"][0]["record_id"] == 8
    assert "extra" not in got["entries"][0]
    (tmp_path / "fr_1").write_bytes(b"\x80\x04pickle")
    assert flight_recorder({"TORCH_FR_DUMP_TEMP_FILE": prefix}, 1)["format"].startswith("not JSON")


def test_write_gives_a_run_directory_the_reader_loads(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"schema": "ddpdoctor.run", "version": 2, "command": "attach"}))
    ranks = [
        RankProc(11, 0, 0, 3, ["python", "train.py"], "/work", 1.0),
        RankProc(12, 1, 1, 3, ["python", "train.py"], "/work", 1.0),
    ]
    job = Job("torchrun", 10, ranks, 3, 3, "/work/train.py", "torchrun:10")
    first = {11: Dump(11, _threads(IN_ALL_REDUCE)), 12: Dump(12, _threads(AT_LINE_50[:1]))}
    last = {11: Dump(11, _threads(IN_ALL_REDUCE)), 12: Dump(12, _threads(AT_LINE_50))}
    write(str(run), job, first, last, {}, 100.0, 102.5, {11: 0.01, 12: 1.9})
    rec = load_run(str(run))
    assert sorted(rec.ranks) == [0, 1, 2]
    r0, r1 = rec.ranks[0], rec.ranks[1]
    assert r0.pid == 11 and r0.event("init")["world_size"] == 3
    assert r0.last_hb["pending"]["op"] == "all_reduce" and r0.last_hb["where"] == ["/work/train.py", 42, "main"]
    assert r0.stacks["moved"] is False and r0.stacks["interval"] == 2.5 and r0.stacks["cpu"] == 0.01
    assert r1.last_hb["pending"] is None and r1.last_hb["where"] == ["/work/train.py", 50, "main"]
    assert r1.stacks["moved"] is True
    assert [e["kind"] for e in rec.ranks[2].events] == ["gone"]  # local rank 2 had exited


def test_a_rank_whose_dump_failed_is_left_out(tmp_path: Path) -> None:
    job = Job("torchrun", 10, [RankProc(11, 0, 0, 1, [], "/", 1.0)], 1, 1, None, "k")
    write(str(tmp_path), job, {}, {11: Dump(11, None, error="py-spy failed")}, {}, 0.0, 1.0, {})
    assert not (tmp_path / "ranks" / "0").exists()
