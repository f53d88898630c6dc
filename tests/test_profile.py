"""`ddpdoctor profile`: NVTX ranges checked with a real NVTX tool (a recorder built here with gcc and loaded
through NVTX_INJECTION64_PATH), the own timeline and its findings, the trace file against the trace-event
format."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import jsonschema
import pytest
from helpers import PROBES, ROOT, ddpdoctor, finding, lines_of, marker_line

STEPS = 6


@pytest.fixture(scope="module")
def recorder(tmp_path_factory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the NVTX recorder")
    out = tmp_path_factory.mktemp("nvtx") / "libnvtxrecorder.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(out), str(ROOT / "tests" / "nvtx_recorder.c"),
                    "-lpthread"], check=True, timeout=120)
    return out


def parse(log: Path) -> dict:
    cats, starts, ends, order = {}, {}, {}, []
    for line in log.read_text().splitlines():
        kind, domain, *rest = line.split(" ", 6)
        if domain != "ddpdoctor":
            continue
        if kind == "C":
            cats[int(rest[0])] = rest[1]
        elif kind == "S":
            rid, cat, tid, payload, msg = rest
            starts[int(rid)] = {"cat": int(cat), "tid": int(tid), "payload": int(payload), "name": msg}
            order.append(("S", int(rid)))
        elif kind == "E":
            ends[int(rest[0])] = int(rest[1])
            order.append(("E", int(rest[0])))
    return {"cats": cats, "starts": starts, "ends": ends, "order": order}


def test_nvtx_ranges_per_rank_with_names_categories_nesting_and_counts(tmp_path, recorder, monkeypatch):
    logs = tmp_path / "nvtx"
    logs.mkdir()
    monkeypatch.setenv("NVTX_INJECTION64_PATH", str(recorder))
    monkeypatch.setenv("NVTX_RECORDER_DIR", str(logs))
    r = ddpdoctor(["profile", "--script", str(PROBES / "straggler.py"), "--", "--steps", str(STEPS)], tmp_path)
    assert r.code == 0, r.err[-2000:]
    pid_rank = {}
    for d in (r.run_dir / "ranks").iterdir():
        start = json.loads((d / "events.jsonl").read_text().splitlines()[0])
        pid_rank[start["pid"]] = int(d.name)
    by_rank = {pid_rank[int(p.stem.split("-")[1])]: parse(p) for p in logs.glob("nvtx-*.log")
               if int(p.stem.split("-")[1]) in pid_rank}
    assert sorted(by_rank) == [0, 1]
    for rank, rec in by_rank.items():
        names = Counter(s["name"] for s in rec["starts"].values())
        assert names["forward"] == names["backward"] == names["optimizer step"] == STEPS, (rank, names)
        assert names["all_reduce bucket 0"] == STEPS  # DDP's own bucket all-reduce, via the timing comm hook
        assert names["step"] == STEPS + 1             # the last one is still open when the script ends
        assert all(rid in rec["ends"] for rid, s in rec["starts"].items() if s["name"] != "step" or s["payload"] < STEPS)
        cat_of = {s["name"]: rec["cats"].get(s["cat"]) for s in rec["starts"].values()}
        assert cat_of["forward"] == cat_of["backward"] == "compute"
        assert cat_of["all_reduce bucket 0"] == "comm" and cat_of["optimizer step"] == "optim"
        assert cat_of["step"] is None
        assert sorted(s["payload"] for s in rec["starts"].values() if s["name"] == "step") == list(range(STEPS + 1))
        # nesting: forward, backward and optimizer step open and close inside their step
        pos = {(k, rid): i for i, (k, rid) in enumerate(rec["order"])}
        steps = sorted((rid for rid, s in rec["starts"].items() if s["name"] == "step" and rid in rec["ends"]),
                       key=lambda rid: pos[("S", rid)])
        inner = [rid for rid, s in rec["starts"].items() if s["name"] in ("forward", "backward", "optimizer step")]
        for rid in inner:
            assert any(pos[("S", st)] < pos[("S", rid)] and pos[("E", rid)] < pos[("E", st)] for st in steps)
        # the bucket all-reduce ends on gloo's thread: a start/end range, not push/pop
        buckets = [rid for rid, s in rec["starts"].items() if s["name"].startswith("all_reduce bucket")]
        assert any(rec["ends"][rid] != rec["starts"][rid]["tid"] for rid in buckets)


def test_no_nvtx_call_without_a_tool(tmp_path, monkeypatch):
    monkeypatch.delenv("NVTX_INJECTION64_PATH", raising=False)
    r = ddpdoctor(["profile", "--script", str(PROBES / "straggler.py"), "--", "--steps", "4"], tmp_path)
    info = [json.loads(l) for l in (r.run_dir / "ranks" / "0" / "timeline.jsonl").read_text().splitlines()
            if '"profile_info"' in l]
    assert info and info[0]["nvtx"] is False


def test_straggler_rank_and_phase(tmp_path):
    r = ddpdoctor(["profile", "--script", str(PROBES / "straggler.py")], tmp_path)
    f = finding(r.report, "profile.straggler")
    assert f["evidence"]["rank"] == 1 and f["evidence"]["phase"] == "forward"
    assert 10 <= f["evidence"]["excess_ms"] <= 40
    assert r.code == 0  # a warning; --fail-on warning makes it fail a CI job


def test_dataloader_bound(tmp_path):
    r = ddpdoctor(["profile", "--script", str(PROBES / "dataloader_bound.py"), "--fail-on", "warning"], tmp_path)
    f = finding(r.report, "profile.dataloader-bound")
    assert f["ranks"] == [0, 1]
    assert lines_of(f, 0) == {marker_line(PROBES / "dataloader_bound.py", "LOOP")}
    assert r.code == 1


TRACE_SCHEMA = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {"traceEvents": {"type": "array", "items": {
        "type": "object",
        "required": ["name", "ph", "pid", "tid"],
        "properties": {"name": {"type": "string"}, "ph": {"enum": ["X", "M", "B", "E", "i", "C"]},
                       "pid": {"type": "integer"}, "tid": {"type": "integer"}, "ts": {"type": "number"},
                       "dur": {"type": "number", "minimum": 0}, "cat": {"type": "string"}, "args": {"type": "object"}},
        "allOf": [{"if": {"properties": {"ph": {"const": "X"}}}, "then": {"required": ["ts", "dur", "cat"]}},
                  {"if": {"properties": {"ph": {"const": "M"}}}, "then": {"required": ["args"]}}]}},
        "displayTimeUnit": {"enum": ["ms", "ns"]}},
}


def test_healthy_profile_and_its_trace_file(tmp_path):
    r = ddpdoctor(["profile", "--", "--epochs", "6"], tmp_path)
    assert r.code == 0
    assert [f["id"] for f in r.report["findings"] if f["severity"] != "note" and not f["id"].startswith("teardown.")] == []
    trace = json.loads((r.run_dir / "trace.json").read_text())
    jsonschema.validate(trace, TRACE_SCHEMA)
    procs = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert procs == {0: "rank 0", 1: "rank 1"}
    per_rank = defaultdict(Counter)
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            per_rank[e["pid"]][e["name"].split(" ")[0]] += 1
    assert set(per_rank) == {0, 1} and all(c["forward"] >= 6 and c["backward"] >= 6 for c in per_rank.values())


def test_nsys_missing_is_one_line_and_could_not_run(tmp_path, monkeypatch):
    if shutil.which("nsys"):
        pytest.skip("nsys is installed here")
    r = ddpdoctor(["profile", "--nsys"], tmp_path, json_report=False)
    assert r.code == 4
    assert r.err.strip().startswith("ddpdoctor: error: nsys (Nsight Systems) is not on PATH")
    assert len(r.err.strip().splitlines()) == 1
