"""The writers of the run directory (record/writer.py): one self-describing line per record, appends
that never raise, a ring that rotates to ``.prev`` and keeps between one and two segments, the mapped
ledger writer whose NUL tail the reader ignores and whose close trims it, and atomic JSON files."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from ddpdoctor.record.tails import Tail
from ddpdoctor.record.writer import JsonlWriter, MappedRingWriter, RingWriter, line, prev_path, write_json_atomic


def _read(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_bytes().split(b"\0")[0].splitlines() if x]


def test_a_line_is_self_describing_and_text_for_what_json_does_not_know() -> None:
    rec = json.loads(line("hb", 1, t=5.0, where=Path("/w/t.py"), step=3))
    assert rec == {"v": 1, "kind": "hb", "rank": 1, "t": 5.0, "where": "/w/t.py", "step": 3}
    assert json.loads(line("exit", None))["t"] > 1e9  # no time given: now


def test_the_writer_creates_a_private_file_and_never_raises(tmp_path: Path) -> None:
    w = JsonlWriter(str(tmp_path / "ranks" / "0" / "events.jsonl"))
    w.write("start", 0, t=1.0, pid=7)
    w.close()
    w.write("finish", 0, t=2.0, code=0)  # reopens
    w.close()
    path = tmp_path / "ranks" / "0" / "events.jsonl"
    assert [r["kind"] for r in _read(path)] == ["start", "finish"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    (tmp_path / "file").write_text("")
    JsonlWriter(str(tmp_path / "file" / "x.jsonl")).write("start", 0)  # cannot be made: swallowed


def test_a_ring_keeps_the_latest_lines_in_two_segments(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    assert prev_path(str(path)) == str(tmp_path / "ledger.prev.jsonl")
    w = RingWriter(str(path), seg_lines=3, shared=True)
    for i in range(8):
        w.write("coll", 0, t=1.0, seq=i)
    w.append_bytes(line("cend", 0, t=1.0, seq=7))  # not counted as a ring line
    w.close()
    assert w.rotations == 2
    assert [r["seq"] for r in _read(tmp_path / "ledger.prev.jsonl")] == [3, 4, 5]
    assert [(r["kind"], r["seq"]) for r in _read(path)] == [("coll", 6), ("coll", 7), ("cend", 7)]


def test_the_mapped_writer_leaves_a_nul_tail_the_reader_skips_and_close_trims(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    w = MappedRingWriter(str(path), seg_lines=1000, chunk=1 << 16)
    tail = Tail(str(path), ring=True)
    for i in range(5):
        w.write("coll", 0, t=1.0, seq=i)
    assert [r["seq"] for r in tail.new_records()] == [0, 1, 2, 3, 4]
    w.write("coll", 0, t=1.0, seq=5)
    assert [r["seq"] for r in tail.new_records()] == [5]
    w.close()
    data = path.read_bytes()
    assert b"\0" not in data and data.count(b"\n") == 6


def test_write_json_atomic_replaces_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    path.write_text("old and longer than the new one")
    write_json_atomic(str(path), {"schema": "ddpdoctor.run", "p": Path("/x")})
    assert json.loads(path.read_text()) == {"schema": "ddpdoctor.run", "p": "/x"}
    assert os.listdir(tmp_path) == ["manifest.json"]
