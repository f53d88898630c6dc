"""Reading a run directory (record/reader.py): the manifest checked with one clear line for each refusal;
every rank file in its field; a heartbeat ring's previous segment read first; the incremental reader
taking only what is new; each rank's stderr found by its local rank; several nodes' directories merged
and a rank given twice refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builder import RunBuilder

from ddpdoctor.record.mirror import load_runs
from ddpdoctor.record.reader import RunDirError, RunReader, load_run, read_manifest


def test_refusals_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(RunDirError, match="no such run directory"):
        read_manifest(str(tmp_path / "none"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunDirError, match=r"not a ddpdoctor run directory \(no manifest.json\)"):
        read_manifest(str(tmp_path / "empty"))
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "manifest.json").write_text('{"schema": "ddp')
    with pytest.raises(RunDirError, match="unreadable or truncated manifest"):
        read_manifest(str(tmp_path / "cut"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "manifest.json").write_text('{"schema": "else"}')
    with pytest.raises(RunDirError, match="not a ddpdoctor run manifest"):
        read_manifest(str(tmp_path / "other"))


def test_each_rank_file_lands_in_its_field(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path / "run").start(0).hb(0, 1.0, 2).hb(0, 2.0, 3)
    b.add(0, "checks.jsonl", "save", 1.5, path="/ck.pt").add(0, "memory.jsonl", "mem", 1.6, step=1, rss=5)
    b.add(0, "stacks.jsonl", "stacks", 1.7, request=1).add(0, "stacks.jsonl", "stacks", 1.8, request=2)
    d = b.root / "ranks" / "0"
    (d / "counters.json").write_text(json.dumps({"ddp_fwd": 7}))
    (d / "error.json").write_text(json.dumps({"type": "ValueError"}))
    (d / "fatal.txt").write_text("Fatal Python error: Aborted")
    b.add(None, "monitor.jsonl", "exit", 3.0, returncode=1)
    rec = load_run(str(b.root))
    r = rec.ranks[0]
    assert r.n_hb == 2 and r.last_hb["t"] == 2.0 and r.pid == 999999
    assert r.checks[0]["path"] == "/ck.pt" and r.memory[0]["rss"] == 5 and r.stacks["request"] == 2
    assert r.counters == {"ddp_fwd": 7} and r.error == {"type": "ValueError"} and r.fatal.startswith("Fatal")
    assert rec.world_size == 2 and rec.latest_t() == 3.0 and rec.monitor_event("exit")["returncode"] == 1


def test_a_heartbeat_rings_previous_segment_is_read_first(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path / "run").start(0).hb(0, 5.0, 9)
    prev = b.root / "ranks" / "0" / "heartbeat.prev.jsonl"
    prev.write_text(
        "".join(json.dumps({"v": 1, "kind": "hb", "rank": 0, "t": float(t), "seq": {"0": t}}) + "\n" for t in (1, 2))
    )
    r = load_run(str(b.root)).ranks[0]
    assert r.n_hb == 3 and r.last_hb["t"] == 5.0


def test_the_incremental_reader_takes_only_what_is_new(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path / "run").start(0).hb(0, 1.0, 2)
    reader = RunReader(str(b.root))
    assert reader.refresh().ranks[0].n_hb == 1
    b.hb(0, 2.0, 2).add(0, "checks.jsonl", "save", 2.1, path="/a.pt")
    cheap = reader.refresh(full=False).ranks[0]
    assert cheap.n_hb == 2 and cheap.checks == []  # the monitor's poll leaves the check records
    full = reader.refresh().ranks[0]
    assert len(full.checks) == 1 and full.seq_changed_t == 1.0  # the sequence did not move at t=2


def test_stderr_is_found_by_local_rank(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path / "run")
    b.add(3, "events.jsonl", "start", 0.0, pid=1, local_rank=1)
    log = b.root / "logs" / "job" / "attempt_0" / "1"
    log.mkdir(parents=True)
    (log / "stderr.log").write_text("Traceback ...\nValueError: bad\n")
    assert load_run(str(b.root)).ranks[3].stderr_tail.endswith("ValueError: bad\n")


def test_nodes_directories_merge_and_a_rank_given_twice_is_refused(tmp_path: Path) -> None:
    a = RunBuilder(tmp_path / "a").start(0).add(None, "monitor.jsonl", "spawned", 2.0, pid=1).root
    b = RunBuilder(tmp_path / "b").start(1).add(None, "monitor.jsonl", "spawned", 1.0, pid=2).root
    rec = load_runs([str(a), str(b)])
    assert list(rec.ranks) == [0, 1] and rec.run_dir == str(a) and [e["pid"] for e in rec.monitor] == [2, 1]
    with pytest.raises(RunDirError, match="rank 0 appears in .* and in another run directory"):
        load_runs([str(a), str(a)])
