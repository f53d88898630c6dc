"""The other nodes' mirrors in RUN_DIR/nodes/<n>/ (record/mirror.py): their ranks added to the node's own
record in node order, a rank the node holds itself never replaced, a lost node's live summary read, and
an unreadable mirror skipped."""

from __future__ import annotations

import json
from pathlib import Path

from builder import RunBuilder

from ddpdoctor.record.mirror import mirror_dirs, with_mirrors
from ddpdoctor.record.reader import load_run


def _node(root: Path, rank: int, t: float) -> Path:
    b = RunBuilder(root).start(rank).hb(rank, t, 4)
    b.add(None, "monitor.jsonl", "spawned", t, pid=100 + rank)
    return root


def test_no_mirrors_leave_the_record_as_it_is(tmp_path: Path) -> None:
    run = _node(tmp_path / "run", 0, 1.0)
    rec = load_run(str(run))
    assert mirror_dirs(str(run)) == [] and with_mirrors(rec, [str(run)]) is rec


def test_mirrors_add_the_other_nodes_ranks_and_monitor_records_in_time_order(tmp_path: Path) -> None:
    run = _node(tmp_path / "run", 0, 2.0)
    _node(run / "nodes" / "10", 3, 1.0)
    _node(run / "nodes" / "2", 1, 3.0)
    (run / "nodes" / "notes").mkdir()
    assert [Path(d).name for d in mirror_dirs(str(run))] == ["2", "10"]
    rec = with_mirrors(load_run(str(run)), [str(run)])
    assert list(rec.ranks) == [0, 1, 3]
    assert [e["pid"] for e in rec.monitor] == [103, 100, 101]
    assert rec.ranks[3].last_hb["t"] == 1.0


def test_a_rank_the_node_holds_itself_is_never_replaced(tmp_path: Path) -> None:
    run = _node(tmp_path / "run", 0, 2.0)
    _node(run / "nodes" / "1", 0, 9.0)  # a stale copy of rank 0
    rec = with_mirrors(load_run(str(run)), [str(run)])
    assert list(rec.ranks) == [0] and rec.ranks[0].last_hb["t"] == 2.0


def test_a_lost_nodes_live_summary_gives_its_ranks(tmp_path: Path) -> None:
    run = _node(tmp_path / "run", 0, 2.0)
    lost = run / "nodes" / "1"
    lost.mkdir(parents=True)
    summary = {"r": 1, "hb": {"t": 1.5, "step": 7}, "n_hb": 3, "ev": [], "led": "[]"}
    (lost / "live.json").write_text(json.dumps({"ranks": [summary, {"no": "rank"}]}))
    rec = with_mirrors(load_run(str(run)), [str(run)])
    assert list(rec.ranks) == [0, 1] and rec.ranks[1].last_hb["step"] == 7 and rec.ranks[1].n_hb == 3


def test_an_unreadable_mirror_is_skipped(tmp_path: Path) -> None:
    run = _node(tmp_path / "run", 0, 2.0)
    bad = run / "nodes" / "1"
    bad.mkdir(parents=True)
    (bad / "manifest.json").write_text('{"schema": "something else"}')
    (run / "nodes" / "2").mkdir()
    (run / "nodes" / "2" / "live.json").write_text("not json")
    rec = load_run(str(run))
    assert with_mirrors(rec, [str(run)]) is rec
