"""digest on hand-built trimmed ledgers: ranks whose running digests at the start of the common ledger
window differ are named (and the hang finding says so), ranks that agree or whose ledger and digest do
not line up are not judged, and findings other than hangs are left alone."""

from __future__ import annotations

import json

from builder import RunBuilder

from ddpdoctor.analysis.findings import Finding
from ddpdoctor.analysis.hang import digest
from ddpdoctor.record.digest import fold, op_hash, shapes_text
from ddpdoctor.record.reader import load_run

SITE = ["/work/train.py", 20, "main"]


def _rank(b: RunBuilder, r: int, c0: int, d0: int, n: int, now: int | None = None) -> None:
    """Rank ``r`` kept ``n`` all_reduce calls at line 20 after ``c0`` calls of digest ``d0``."""
    b.start(r)
    for s in range(c0 + 1, c0 + n + 1):
        b.coll(r, s, 20)
    b.finish(r, 3.0, seq=c0 + n, digest={"0": [now if now is not None else c0 + n, 0]}, digest0={"0": [c0, d0]})


def _folded(d0: int, calls: int) -> int:
    h = op_hash("all_reduce", shapes_text([[4]]), SITE)
    for _ in range(calls):
        d0 = fold(d0, h)
    return d0


def _hang() -> Finding:
    return Finding("hang.timeout", "error", "no progress for 10 s", "hint", (0, 1), (), {}, culprits=(1,))


def test_ranks_with_the_same_digest_at_the_window_start_are_not_judged(tmp_path):
    b = RunBuilder(tmp_path / "run")
    _rank(b, 0, 8, 1234, 5)  # its digest at call 10 is 1234 folded over its two calls 9 and 10
    _rank(b, 1, 10, _folded(1234, 2), 3)
    record = load_run(str(b.root))
    assert digest.before_window(record) is None
    assert digest.annotate([_hang()], record)[0].message == "no progress for 10 s"


def test_ranks_whose_digests_differ_before_the_window_are_named(tmp_path):
    b = RunBuilder(tmp_path / "run")
    _rank(b, 0, 8, 1234, 5)
    _rank(b, 1, 10, _folded(1234, 2) + 1, 3)
    record = load_run(str(b.root))
    info = digest.before_window(record)
    assert info is not None and (info["group"], info["count"], info["kept"]) == ("0", 10, 3)
    assert sorted(info["digests"].values()) == [[0], [1]]
    (f,) = digest.annotate([_hang()], record)
    assert f.message.startswith("no progress for 10 s; the ranks' collective sequences of group 0 already differed")
    assert "within their first 10 Python-level calls" in f.message and "DDPDOCTOR_LEDGER_RING" in f.message
    assert f.evidence["before_window"] == info and f.culprits == (1,)


def test_a_ledger_that_does_not_start_where_its_digest0_says_is_not_judged(tmp_path):
    b = RunBuilder(tmp_path / "run")
    _rank(b, 0, 8, 1234, 5)
    _rank(b, 1, 10, 999, 3, now=14)  # 10 + 3 kept calls is not 14
    assert digest.before_window(load_run(str(b.root))) is None


def test_whole_ledgers_and_findings_other_than_hangs_are_left_alone(tmp_path):
    b = RunBuilder(tmp_path / "run")
    _rank(b, 0, 0, 0, 3)
    _rank(b, 1, 0, 0, 3)
    assert digest.before_window(load_run(str(b.root))) is None
    b2 = RunBuilder(tmp_path / "run2")
    _rank(b2, 0, 8, 1234, 5)
    _rank(b2, 1, 10, 7, 3)
    crash = Finding("crash.exception", "error", "rank 1 raised", "h", (0, 1), (), {}, culprits=(1,))
    assert digest.annotate([crash], load_run(str(b2.root))) == [crash]


# -- the recorder's chunks (recorder_window, proven_extra): ranks whose calls torch's ring holds --------------


def _flight_rank(b: RunBuilder, r: int, chunks: dict, first: int = 17, last: int = 24) -> None:
    """Rank ``r`` left its all_reduces to torch's recorder, whose wrapped ring holds positions ``first``-``last``
    (line 20), with the chunks (size 4) its reads kept."""
    b.start(r)
    b.add(r, "events.jsonl", "init", 0.2, global_rank=r, world_size=2, backend="gloo", recorded=["all_reduce"])
    entries = [
        {
            "record_id": 100 + p,
            "pg_id": 0,
            "process_group": ["0", "default_pg"],
            "op_id": p,
            "collective_seq_id": p,
            "profiling_name": "gloo:all_reduce",
            "input_sizes": [[4]],
            "input_dtypes": ["Float"],
            "time_created_ns": int((1 + p / 100) * 1e9),
            "state": "scheduled",
            "frames": [{"filename": "/work/train.py", "line": 20, "name": "main"}],
        }
        for p in range(first, last + 1)
    ]
    dump = {
        "entries": entries,
        "pg_status": {"0": {"last_enqueued_collective": last, "last_completed_collective": last - 1}},
        "ddpdoctor": {"rank": r, "reason": "end", "first_record": 100 + first, "chunks": {"size": 4, "groups": chunks}},
    }
    path = b.root / "ranks" / str(r) / "flight.json"
    path.write_text(json.dumps(dump))
    b.finish(r, 3.0, code=0, seq=last)


def _chunk(*lines: int) -> list:
    """A chunk's [digest, counts] as the rank keeps it, for calls at these lines."""
    h, counts = 0, {}
    for line in lines:
        h = fold(h, op_hash("all_reduce", "[[4]]", ["/work/train.py", line, "main"]))
        counts[f"all_reduce train.py:{line}"] = counts.get(f"all_reduce train.py:{line}", 0) + 1
    return [h, counts]


ROUTINE = {str(k): _chunk(20, 20, 20, 20) for k in range(6)}


def test_chunks_read_on_every_rank_and_agreeing_leave_nothing_out_of_sight(tmp_path):
    b = RunBuilder(tmp_path / "run")
    for r in (0, 1):
        _flight_rank(b, r, {"0": dict(ROUTINE)})
    assert digest.recorder_window(load_run(str(b.root))) is None


def test_a_chunk_no_read_saw_is_named_and_the_window_is_out_of_sight(tmp_path):
    b = RunBuilder(tmp_path / "run")
    _flight_rank(b, 0, {"0": dict(ROUTINE)})
    _flight_rank(b, 1, {"0": {k: v for k, v in ROUTINE.items() if k != "2"}})
    key, info = digest.recorder_window(load_run(str(b.root)))
    assert key == "recorder_window" and info["unread"] == [9, 12] and info["first"] == 17
    assert "(no read of #9-#12)" in digest.recorder_sentence(info)


def test_a_line_only_one_rank_called_before_the_ring_is_its_extra_call(tmp_path):
    b = RunBuilder(tmp_path / "run")
    _flight_rank(b, 0, {"0": {**ROUTINE, "1": _chunk(20, 30, 20, 20)}})
    _flight_rank(b, 1, {"0": dict(ROUTINE)})
    record = load_run(str(b.root))
    key, info = digest.recorder_window(record)
    assert key == "before_ring" and (info["from"], info["to"]) == (5, 8)
    assert digest.proven_extra(record, info) == ([0], "all_reduce", "/work/train.py", 30)
    [f] = digest.annotate([_hang()], record)
    assert f.id == "hang.rank-conditional-collective" and f.culprits == (0,)
    assert (f.locations[0].rank, f.locations[0].line, f.locations[0].role) == (0, 30, "diverged")
    assert "which rank 1 never called" in f.message and f.evidence["window_finding"] == "hang.timeout"


def test_a_line_every_rank_calls_at_times_proves_no_extra_call(tmp_path):
    """Rank 0 made a call at line 30 in chunk 1 that rank 1 did not make there, but rank 1 calls line 30 too
    (chunk 3): which rank left out or added a call is not proven, and the finding says where they parted."""
    b = RunBuilder(tmp_path / "run")
    _flight_rank(b, 0, {"0": {**ROUTINE, "1": _chunk(20, 30, 20, 20)}})
    _flight_rank(b, 1, {"0": {**ROUTINE, "3": _chunk(20, 20, 30, 20)}})
    record = load_run(str(b.root))
    key, info = digest.recorder_window(record)
    assert key == "before_ring" and info["from"] == 5
    assert digest.proven_extra(record, info) is None
    [f] = digest.annotate([_hang()], record)
    assert f.id == "hang.timeout" and "already differed at #5-#8" in f.message
    assert "rank 0 made 1 all_reduce at train.py:30 where the others made none" in f.message
