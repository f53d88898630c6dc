"""The pure layers on hand-built run directories: reader, detectors, renderers."""

from __future__ import annotations

import json
from xml.etree import ElementTree as ET

import pytest
from builder import RunBuilder, pending

from ddpdoctor.analysis import diagnose
from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.live import live_verdict
from ddpdoctor.record.reader import RunDirError, load_run
from ddpdoctor.render import RENDERERS

CFG = Config(timeout=10.0)


def test_reader_skips_a_truncated_last_line(tmp_path):
    b = RunBuilder(tmp_path / "run").start(0).hb(0, 1.0, 2)
    with (tmp_path / "run" / "ranks" / "0" / "heartbeat.jsonl").open("a") as f:
        f.write('{"v": 1, "kind": "hb", "rank": 0, "t": 2.0, "st')
    rec = load_run(str(b.root))
    assert rec.ranks[0].n_hb == 1 and rec.ranks[0].last_hb["t"] == 1.0


def test_reader_refuses_unknown_version(tmp_path):
    RunBuilder(tmp_path / "run", version=7)
    with pytest.raises(RunDirError, match="version 7"):
        load_run(str(tmp_path / "run"))


def two_ranks_waiting(tmp_path, p0: dict, p1: dict, t: float = 5.0) -> RunBuilder:
    b = RunBuilder(tmp_path / "run").start(0).start(1)
    for r, p in ((0, p0), (1, p1)):
        b.hb(r, 1.0, p["seq"] - 1).hb(r, p["since"] + 0.1, p["seq"], p).hb(r, t, p["seq"], p)
    return b


def test_same_collective_everywhere_is_not_certain_until_timeout_then_a_stall(tmp_path):
    b = two_ranks_waiting(tmp_path, pending("all_reduce", 5, 20, 2.0), pending("all_reduce", 5, 20, 2.0), t=13.0)
    rec = load_run(str(b.root))
    assert live_verdict(rec, CFG, now=5.0) is None
    assert live_verdict(rec, CFG, now=13.0)[0] == "timeout"
    b.add(None, "monitor.jsonl", "verdict", 13.0, mode="timeout", reason="x")
    report = diagnose(load_run(str(b.root)), CFG)
    assert [f.id for f in report.findings] == ["hang.transport-stall"]
    assert report.exit_code == 3 and report.verdict == "hang"


def test_different_ops_at_the_same_position_are_certain_within_settle(tmp_path):
    b = two_ranks_waiting(tmp_path, pending("all_reduce", 5, 20, 2.0), pending("barrier", 5, 30, 2.0, ()))
    rec = load_run(str(b.root))
    assert live_verdict(rec, CFG, now=2.5) is None  # not yet settled
    kind, reason = live_verdict(rec, CFG, now=3.5)
    assert kind == "certain" and "barrier" in reason


def test_peer_that_moved_on_with_a_ddp_allreduce_makes_it_certain(tmp_path):
    b = RunBuilder(tmp_path / "run").start(0).start(1)
    p = pending("barrier", 7, 44, 2.0, ())
    b.hb(0, 1.0, 6).hb(0, 2.1, 7, p).hb(0, 4.0, 7, p)
    b.coll(1, 6, 40).hb(1, 1.0, 6).hb(1, 2.0, 9, in_backward=True).hb(1, 4.0, 9)  # 7..9: DDP's, from C++
    kind, reason = live_verdict(load_run(str(b.root)), CFG, now=4.0)
    assert kind == "certain" and "DDP all-reduce" in reason


def test_busy_peer_behind_is_uncertain(tmp_path):
    b = RunBuilder(tmp_path / "run").start(0).start(1)
    p = pending("barrier", 7, 44, 2.0, ())
    b.hb(0, 2.1, 7, p).hb(0, 12.4, 7, p)
    b.hb(1, 1.0, 6, where=31).hb(1, 12.4, 6, where=31)
    rec = load_run(str(b.root))
    assert live_verdict(rec, CFG, now=8.0) is None
    assert live_verdict(rec, CFG, now=12.5)[0] == "timeout"


def test_symmetric_if_else_is_not_a_divergence_but_an_extra_call_is(tmp_path):
    b = RunBuilder(tmp_path / "run").start(0).start(1)
    # both ranks broadcast from different lines (if rank == 0: ... else: ...): a correct pattern
    b.coll(0, 1, 10, "broadcast").coll(1, 1, 12, "broadcast")
    for s in (2, 3, 4):
        b.coll(0, s, 20).coll(1, s, 20)
    b.coll(0, 5, 22)  # rank 0 only: an extra all_reduce of the same shape
    b.coll(0, 6, 20).coll(1, 5, 20)
    p = pending("all_reduce", 7, 20, 2.0)
    b.hb(0, 2.1, 7, p).hb(0, 5.0, 7, p)
    b.hb(1, 2.1, 6, pending("barrier", 6, 30, 2.0, ())).hb(1, 5.0, 6, pending("barrier", 6, 30, 2.0, ()))
    b.add(None, "monitor.jsonl", "verdict", 5.0, mode="certain", reason="x")
    report = diagnose(load_run(str(b.root)), CFG)
    f = report.findings[0]
    assert f.id == "hang.rank-conditional-collective"
    assert [(l.rank, l.line) for l in f.locations if l.role == "diverged"] == [(0, 22)]


def test_teardown_abort_after_finishing_is_a_warning_not_a_failure(tmp_path):
    b = RunBuilder(tmp_path / "run").start(0).start(1).finish(0, 3.0, seq=9).finish(1, 3.0, seq=9)
    b.add(None, "monitor.jsonl", "exit", 4.0, returncode=1)
    log = b.root / "logs" / "x" / "attempt_0" / "1"
    log.mkdir(parents=True)
    (log / "stderr.log").write_text("terminate called without an active exception\n")
    report = diagnose(load_run(str(b.root)), CFG)
    assert [(f.id, f.severity, f.ranks) for f in report.findings] == [("teardown.gloo-abort", "warning", (1,))]
    assert report.exit_code == 0 and report.verdict == "ok"
    assert diagnose(load_run(str(b.root)), Config(fail_on="warning")).exit_code == 1


def test_json_report_schema_and_junit_counts(tmp_path):
    b = two_ranks_waiting(
        tmp_path, pending("all_reduce", 5, 20, 2.0, ((3,),)), pending("all_reduce", 5, 20, 2.0, ((4,),))
    )
    b.add(None, "monitor.jsonl", "verdict", 5.0, mode="certain", reason="x")
    report = diagnose(load_run(str(b.root)), CFG)
    d = json.loads(RENDERERS["json"](report))
    assert d["schema"] == "ddpdoctor.report" and d["version"] == 2
    assert {"command", "verdict", "exit_code", "run_dir", "findings"} <= set(d)
    f = d["findings"][0]
    assert f["id"] == "hang.shape-mismatch"
    assert {"id", "severity", "ranks", "culprits", "locations", "message", "hint"} <= set(f)
    assert f["culprits"] == [0, 1]  # two ranks, two shapes: no majority to blame
    assert all(isinstance(l["line"], int) and {"rank", "file", "line"} <= set(l) for l in f["locations"])
    suite = ET.fromstring(RENDERERS["junit"](report))
    assert suite.tag == "testsuite"
    cases = suite.findall("testcase")
    assert int(suite.get("tests")) == len(cases) and int(suite.get("failures")) == 1
    assert cases[0].find("failure").get("type") == "hang.shape-mismatch"


def test_analyze_compares_ranks_across_nodes_run_directories(tmp_path):
    """Two nodes, one run directory each: the sampler seeds differ across nodes."""
    for node, rank in ((0, 0), (1, 1)):
        b = RunBuilder(tmp_path / f"node{node}", command="check").start(rank)
        b.add(
            rank,
            "checks.jsonl",
            "sampler",
            1.0,
            sid=1,
            epoch=0,
            seed=100 + rank,
            shuffle=True,
            drop_last=False,
            num_replicas=2,
            sampler_rank=rank,
            dataset_len=8,
            n=4,
            digest=f"d{rank}",
            indices=None,
            site=["/work/train.py", 30, "main"],
        )
    from ddpdoctor.record.mirror import load_runs

    report = diagnose(load_runs([str(tmp_path / "node0"), str(tmp_path / "node1")]), CFG)
    f = next(f for f in report.findings if f.id == "data.sampler-seed-mismatch")
    assert f.ranks == (0, 1) and report.exit_code == 1
    with pytest.raises(RunDirError, match="appears in"):
        load_runs([str(tmp_path / "node0"), str(tmp_path / "node0")])


def test_a_probe_that_failed_inside_a_rank_is_reported_not_hidden(tmp_path):
    """A wrapper whose own bookkeeping raised lets the call through unrecorded and says so (probe_error):
    the report names it as ddpdoctor's bug, a note that leaves a clean run's verdict OK."""
    b = RunBuilder(tmp_path / "run")
    for r in (0, 1):
        b.start(r)
        b.coll(r, 1, 12)
        b.add(r, "events.jsonl", "finish", 5.0, code=0)
    b.add(1, "events.jsonl", "probe_error", 1.0, where="collective wrapper (all_gather)", error="ValueError: boom")
    rep = diagnose(load_run(str(tmp_path / "run")), Config())
    f = [x for x in rep.findings if x.id == "probe.internal-error"]
    assert len(f) == 1 and f[0].severity == "note" and f[0].ranks == (1,)
    assert "collective wrapper (all_gather)" in f[0].message and "ValueError: boom" in f[0].message
    assert rep.verdict == "ok" and rep.exit_code == 0
