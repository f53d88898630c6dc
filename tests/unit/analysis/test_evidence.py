"""What the collectives' judgement stands on (analysis/evidence.py), on hand-built runs: a rank without a
flight record makes the others' torch-made calls at the positions it cannot see set aside (the culprit
never rests on one rank's records alone), and the notes say when the recorder was off or a rank's flight
record is missing."""

from __future__ import annotations

import json

from builder import RunBuilder

from ddpdoctor.analysis import evidence
from ddpdoctor.record.reader import load_run


def _flight(b: RunBuilder, rank: int, positions: list[int]) -> None:
    entries = [
        {
            "pg_id": 0,
            "process_group": ["0", "default_pg"],
            "op_id": p,
            "collective_seq_id": p,
            "profiling_name": "gloo:all_reduce",
            "time_created_ns": p * 10**9,
            "input_sizes": [[20]],
            "input_dtypes": ["Float"],
            "state": "scheduled",
            "is_p2p": False,
        }
        for p in positions
    ]
    dump = {"version": "2.10", "pg_status": {"0": {"last_completed_collective": max(positions)}}, "entries": entries}
    (b.root / "ranks" / str(rank) / "flight.json").write_text(json.dumps(dict(dump, ddpdoctor={"rank": rank})))


def test_a_rank_without_a_flight_record_sets_aside_the_others_torch_made_calls_it_cannot_see(tmp_path):
    b = RunBuilder(tmp_path / "run")
    for r in (0, 1):
        b.start(r)
        b.coll(r, 4, 30, t=5.0)  # a Python call both ranks' wrappers saw
        b.hb(r, 6.0, 5)
    b.coll(1, 5, 31, t=5.5)  # ... and one more on rank 1 alone
    _flight(b, 0, [1, 2, 3, 5])  # DDP's bucket all-reduces, only rank 0 dumped them
    rec = load_run(str(tmp_path / "run"))
    assert [e["seq"][0] for e in rec.ranks[0].ledger] == [1, 2, 3, 4, 5]
    got = evidence.harmonized(rec)
    # positions 1-3 are unknown on rank 1 (no entry, no flight record): set aside; 5 is rank 1's own call
    assert [e["seq"][0] for e in got.ranks[0].ledger] == [4, 5]
    assert [e["seq"][0] for e in rec.ranks[0].ledger] == [1, 2, 3, 4, 5]  # the input is not changed
    notes = evidence.recorder_notes(rec)
    assert notes == ()  # start events without "flight" (an older run): nothing to say


def test_the_notes_name_the_ranks_whose_recorder_was_off_and_whose_record_is_missing(tmp_path):
    b = RunBuilder(tmp_path / "run")
    b.add(0, "events.jsonl", "start", 0.0, pid=1, flight={"on": False, "buffer": 0, "off": "TORCH_FR_BUFFER_SIZE='0'"})
    b.add(0, "events.jsonl", "init", 0.1, global_rank=0, world_size=2, backend="gloo")
    b.add(1, "events.jsonl", "start", 0.0, pid=2, flight={"on": True, "buffer": 2000})
    b.add(1, "events.jsonl", "init", 0.1, global_rank=1, world_size=2, backend="gloo")
    off, missing = evidence.recorder_notes(load_run(str(tmp_path / "run")))
    assert "rank 0" in off and "TORCH_FR_BUFFER_SIZE='0'" in off
    assert "rank 1" in missing and "no flight record" in missing
