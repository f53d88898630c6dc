"""Long runs (issue 10): the ledger and heartbeat files are rings of bounded size, and a divergence
inside the ring is still found at its line. Real ranks (2, gloo) with small rings set by env vars."""

from __future__ import annotations

import json
from pathlib import Path

from ddpdoctor.record import reader, schema
from ddpdoctor.record.writer import RingWriter, prev_path


def test_incremental_reader_follows_rotations(tmp_path):
    """The monitor's reader polls while the writer rotates: nothing read twice, the newest lines kept,
    a segment rotated away between two polls skipped (and said so)."""
    path = tmp_path / "ranks" / "0" / schema.LEDGER
    w = RingWriter(str(path), seg_lines=10)
    t = reader._Tail(str(path), ring=True)
    seen: list[int] = []
    for i in range(25):
        w.write_bytes((json.dumps({"kind": "x", "i": i}) + "\n").encode())
        if i % 3 == 0:
            seen += [e["i"] for e in t.new_records()]
    seen += [e["i"] for e in t.new_records()]
    assert seen == list(range(25)) and not t.skipped
    for i in range(25, 60):  # 35 lines, 3 rotations, no poll
        w.write_bytes((json.dumps({"kind": "x", "i": i}) + "\n").encode())
    got = [e["i"] for e in t.new_records()]
    assert t.skipped and got == list(range(50, 60))
    w.close()


def test_mapped_ledger_counts_collectives_spans_chunks_and_ignores_a_forked_child(tmp_path):
    """The ledger's writer (a memory map of the file, 4 KiB chunks here): a segment holds ``seg_lines``
    collectives, an end line stays in its collective's segment; a reader polling while it writes gets
    every line once, lines that span a chunk's end included, and stops at the NUL bytes of the unwritten
    rest; a forked child (a DataLoader worker) writes nothing into the parent's file; close trims."""
    import os

    from ddpdoctor.record.writer import MappedRingWriter

    path = tmp_path / "ranks" / "0" / schema.LEDGER
    w = MappedRingWriter(str(path), seg_lines=100, chunk=4096)
    t = reader._Tail(str(path), ring=True)
    seen: list[tuple] = []
    for i in range(250):
        w.write_bytes((json.dumps({"kind": "coll", "i": i, "pad": "x" * (i % 97)}) + "\n").encode())
        if i % 10 == 0:  # an end line, uncounted
            w.append_bytes((json.dumps({"kind": "cend", "i": i}) + "\n").encode())
        if i % 7 == 0:
            seen += [(e["kind"], e["i"]) for e in t.new_records()]
    pid = os.fork()
    if pid == 0:  # the child's line must not reach the file
        w.write_bytes(b'{"kind":"coll","i":-1}\n')
        w.close()
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    assert path.read_bytes().endswith(b"\0")  # not trimmed yet: the map's unwritten rest
    seen += [(e["kind"], e["i"]) for e in t.new_records()]
    expected = [x for i in range(250) for x in ([("coll", i), ("cend", i)] if i % 10 == 0 else [("coll", i)])]
    assert seen == expected and not t.skipped
    w.close()
    cur, prev = path.read_bytes(), Path(prev_path(str(path))).read_bytes()
    assert b"\0" not in cur and b"\0" not in prev and cur.endswith(b"\n")
    kinds = [json.loads(l) for l in prev.splitlines()]
    # the second segment: collectives 100-199, each end line beside its collective
    assert [e["i"] for e in kinds if e["kind"] == "coll"] == list(range(100, 200))
    assert [e["i"] for e in kinds if e["kind"] == "cend"] == list(range(100, 200, 10))
    assert [json.loads(l)["i"] for l in cur.splitlines() if b'"coll"' in l] == list(range(200, 250))
