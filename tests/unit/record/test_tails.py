"""The incremental JSON-lines readers (record/tails.py): only whole new lines each call, a cut last line
held until its end arrives, garbage lines skipped, NUL bytes as the end of data, and a ring file's
previous segment read first and finished across a rotation."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ddpdoctor.record.tails import Tail


def _line(i: int) -> bytes:
    return (json.dumps({"v": 1, "kind": "hb", "i": i}) + "\n").encode()


def _append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


def test_a_missing_file_reads_as_nothing(tmp_path: Path) -> None:
    assert Tail(str(tmp_path / "none.jsonl")).new_records() == []
    assert Tail(str(tmp_path / "none.jsonl"), ring=True).new_records() == []


def test_only_new_lines_are_returned_and_a_cut_line_waits_for_its_end(tmp_path: Path) -> None:
    p = tmp_path / "events.jsonl"
    _append(p, _line(0) + _line(1))
    t = Tail(str(p))
    assert [r["i"] for r in t.new_records()] == [0, 1]
    assert t.new_records() == []
    whole = _line(2)
    _append(p, whole[:10])
    assert t.new_records() == []
    _append(p, whole[10:] + b"not json\n" + b"[1, 2]\n" + _line(3))
    assert [r["i"] for r in t.new_records()] == [2, 3]  # a garbage line and a non-object are skipped


def test_nul_bytes_end_the_data_until_they_are_written_over(tmp_path: Path) -> None:
    p = tmp_path / "ledger.jsonl"
    p.write_bytes(_line(0) + b"\0" * 32)
    t = Tail(str(p))
    assert [r["i"] for r in t.new_records()] == [0]
    with p.open("r+b") as f:  # the mapped writer fills its chunk in place
        f.seek(len(_line(0)))
        f.write(_line(1))
    assert [r["i"] for r in t.new_records()] == [1]


def test_a_fast_parser_is_tried_first_and_json_takes_what_it_declines(tmp_path: Path) -> None:
    p = tmp_path / "ledger.jsonl"
    p.write_bytes(b"FAST 7\n" + _line(1))
    t = Tail(str(p), fast=lambda raw: {"fast": int(raw.split()[1])} if raw.startswith(b"FAST") else None)
    assert t.new_records() == [{"fast": 7}, {"v": 1, "kind": "hb", "i": 1}]


def test_a_ring_reads_the_previous_segment_first_and_says_it_skipped_older_ones(tmp_path: Path) -> None:
    p = tmp_path / "heartbeat.jsonl"
    (tmp_path / "heartbeat.prev.jsonl").write_bytes(_line(0) + _line(1))
    p.write_bytes(_line(2))
    t = Tail(str(p), ring=True)
    assert [r["i"] for r in t.new_records()] == [0, 1, 2]
    assert t.skipped  # rotated before the first look: older segments may be gone


def test_a_rotation_between_reads_finishes_the_old_segment_then_reads_the_new(tmp_path: Path) -> None:
    p = tmp_path / "heartbeat.jsonl"
    prev = tmp_path / "heartbeat.prev.jsonl"
    p.write_bytes(_line(0))
    t = Tail(str(p), ring=True)
    assert [r["i"] for r in t.new_records()] == [0]
    _append(p, _line(1))
    os.replace(p, prev)  # the writer rotates ...
    p.write_bytes(_line(2))  # ... and starts a fresh segment
    assert [r["i"] for r in t.new_records()] == [1, 2]
    assert not t.skipped
