"""What a node tells the others through the job store (record/nodeview.py): values of another job,
schema or version ignored with a note; a rank summary round-trips to a RankRecord (times shifted on
request); a node value's ranks decoded on demand; a final bundle written back as a run directory the
reader loads, with names that would leave it skipped."""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path

from builder import RunBuilder, pending

from ddpdoctor.record import nodeview
from ddpdoctor.record.nodeview import (
    S_FINAL,
    S_NODE,
    bundle_run,
    envelope,
    node_ranks,
    node_value,
    parse,
    rank_from_summary,
    rank_summary,
    write_mirror,
)
from ddpdoctor.record.reader import load_run


def test_values_of_another_job_schema_or_version_are_ignored_with_a_note() -> None:
    good = envelope(S_FINAL, "job1", node=2)
    doc, note = parse(good, S_FINAL, "job1")
    assert note is None and doc["node"] == 2
    assert parse(good, S_FINAL, "job2") == (
        None,
        "ignored a ddpdoctor.node-final value of another job id ('job1', this job 'job2')",
    )
    assert parse(good, S_NODE, "job1")[1] == "ignored a value that is not a ddpdoctor.node record"
    old = json.dumps({"schema": S_FINAL, "v": 1, "job": "job1"}).encode()
    assert (
        parse(old, S_FINAL, "job1")[1] == "ignored a ddpdoctor.node-final value of version 1 (this ddpdoctor reads 2)"
    )
    assert parse(b"\x80garbage", S_FINAL, "job1")[1] == "ignored a ddpdoctor.node-final value that is not JSON"
    assert parse(None, S_FINAL, "job1") == (None, None)


def test_a_rank_summary_round_trips_and_its_times_can_be_shifted(tmp_path: Path) -> None:
    p = pending("all_reduce", 5, 20, 2.0)
    b = RunBuilder(tmp_path / "run").start(1).hb(1, 1.0, 4).hb(1, 3.0, 5, p).coll(1, 5, 20)
    rec = load_run(str(b.root)).ranks[1]
    d = rank_summary(rec)
    assert isinstance(d["led"], str) and json.loads(d["led"])[0]["op"] == "all_reduce"
    back = rank_from_summary(json.loads(json.dumps(d)))
    assert back.rank == 1 and back.last_hb["pending"]["seq"] == 5 and back.last_hb["t"] == 3.0
    assert [e["kind"] for e in back.events] == ["start", "init"] and back.ledger[0]["rank"] == 1
    moved = rank_from_summary(d, shift=10.0, ledger=False)
    assert moved.last_hb["t"] == 13.0 and moved.last_hb["pending"]["since"] == 12.0
    assert p["since"] == 2.0 and moved.ledger == [] and moved.ledger_trimmed  # the summary is not changed
    assert rank_from_summary({"no": "rank"}) is None


def test_a_node_values_ranks_are_decoded_on_demand() -> None:
    ranks = [{"r": 0, "ev": [{"kind": "finish"}]}, {"r": 1, "ev": []}]
    doc, note = parse(node_value("job", node=0, ranks=ranks), S_NODE, "job")
    assert note is None and doc["rids"] == [0, 1] and doc["running"] == [1] and "ranks" not in doc
    assert node_ranks(doc) == ranks and node_ranks(doc) == ranks  # decoded once, then kept


def test_a_final_bundle_becomes_a_run_directory_the_reader_loads(tmp_path: Path) -> None:
    src = RunBuilder(tmp_path / "node1").start(2).hb(2, 1.0, 3).finish(2, 2.0, seq=3).root
    bundle = bundle_run(str(src), [2])
    dest = tmp_path / "run" / nodeview.MIRRORS_DIR / "1"
    assert write_mirror(str(dest), bundle) == bundle["n"] >= 3
    rec = load_run(str(dest))
    assert list(rec.ranks) == [2] and rec.ranks[2].event("finish")["t"] == 2.0


def test_a_bundle_never_writes_outside_its_directory(tmp_path: Path) -> None:
    files = {"../escape.txt": "x", "/abs.txt": "x", "ranks/0/./e.jsonl": "x", "ranks/0/events.jsonl": "{}\n"}
    bundle = {"files": base64.b64encode(zlib.compress(json.dumps(files).encode())).decode()}
    dest = tmp_path / "m"
    assert write_mirror(str(dest), bundle) == 1
    assert not (tmp_path / "escape.txt").exists() and (dest / "ranks" / "0" / "events.jsonl").exists()
    assert write_mirror(str(dest), {"files": "not base64 zlib"}) == 0
