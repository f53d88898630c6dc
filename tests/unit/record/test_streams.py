"""The table of rank files (record/streams.py): what each file feeds, reading a whole file (JSON object,
text, unreadable), and when two heartbeats count as progress."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.record import schema
from ddpdoctor.record.reader import RankRecord
from ddpdoctor.record.streams import LATEST, ONCE, STREAMS, WHOLE, Whole, progressed, read_whole


def test_every_stream_and_whole_file_feeds_a_field_of_the_rank_record() -> None:
    fields = set(RankRecord.__dataclass_fields__)
    assert all(s.field in fields for s in STREAMS) and all(w.field in fields for w in WHOLE)
    by_name = {s.name: s for s in STREAMS}
    assert by_name[schema.LEDGER].ring and not by_name[schema.LEDGER].poll
    assert by_name[schema.HEARTBEAT].ring and by_name[schema.HEARTBEAT].poll


def test_read_whole_reads_an_object_text_and_refuses_garbage(tmp_path: Path) -> None:
    counters = Whole("counters.json", "counters", LATEST)
    error = Whole("error.json", "error", ONCE)
    text = Whole("fatal.txt", "fatal", ONCE, text=True)
    (tmp_path / "c.json").write_text('{"ddp_fwd": 3}')
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "bad.json").write_text('{"ddp_f')
    (tmp_path / "f.txt").write_bytes(b"Fatal Python error: Aborted\n\xff" + b"x" * 70000)
    assert read_whole(counters, str(tmp_path / "c.json")) == (True, {"ddp_fwd": 3})
    assert read_whole(counters, str(tmp_path / "list.json")) == (True, {})  # LATEST: an empty object
    assert read_whole(error, str(tmp_path / "list.json")) == (True, None)
    assert read_whole(counters, str(tmp_path / "bad.json")) == (False, None)  # half-written: leave it
    assert read_whole(error, str(tmp_path / "missing.json")) == (False, None)
    got, value = read_whole(text, str(tmp_path / "f.txt"))
    assert got and value.startswith("Fatal Python error: Aborted\n\ufffd") and len(value) == 65536


def test_a_step_a_collective_or_a_new_line_is_progress() -> None:
    hb = {"t": 1.0, "seq": {"0": 3}, "step": 5, "where": ["a.py", 10, "f"], "cpu": 1.0}
    assert not progressed(hb, dict(hb, t=2.0))
    assert progressed(hb, dict(hb, t=2.0, step=6))
    assert progressed(hb, dict(hb, t=2.0, seq={"0": 4}))
    assert progressed(hb, dict(hb, t=2.0, where=["a.py", 11, "f"]))


def test_a_wait_that_first_shows_is_not_progress_and_one_that_ends_is() -> None:
    hb = {"t": 1.0, "seq": {"0": 17}, "step": 6, "where": ["a.py", 25, "drain"], "cpu": 1.0}
    call = {"op": "all_reduce", "group": "0", "seq": 17, "since": 0.5}
    assert not progressed(hb, dict(hb, t=2.0, awaiting=call))  # named late by the recorder: it was already there
    assert not progressed(hb, dict(hb, t=2.0, pending=call))
    assert progressed(dict(hb, awaiting=call), dict(hb, t=2.0))  # the call completed
    assert progressed(dict(hb, pending=call), dict(hb, t=2.0, pending=dict(call, seq=18)))  # another call


def test_cpu_time_counts_as_progress_only_above_the_busy_share() -> None:
    hb = {"t": 1.0, "step": 5, "cpu": 1.0}
    assert progressed(hb, dict(hb, t=2.0, cpu=1.5))  # half a core: computing in one long line
    assert not progressed(hb, dict(hb, t=2.0, cpu=1.01))  # blocked in C++
    assert not progressed({"t": 1.0}, {"t": 2.0})  # no CPU figures: no proof of progress
    # two beats under a ms apart (the one the monitor's request for stacks adds): a ms of CPU tells nothing
    assert not progressed(hb, dict(hb, t=1.0007, cpu=1.001))
