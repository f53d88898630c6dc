"""`ddpdoctor profile`: NVTX ranges checked with a real NVTX tool (a recorder built here with gcc and loaded
through NVTX_INJECTION64_PATH), the own timeline and its findings, the trace file against the trace-event
format."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import jsonschema
import pytest
from builder import RunBuilder
from helpers import PROBES, ROOT, ddpdoctor, finding, lines_of, marker_line

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.profile import breakdown as profile_analysis
from ddpdoctor.record.reader import load_run

STEPS = 6
STRAGGLER_STEPS = 40  # probes/straggler.py's default --steps: one bucket all-reduce per step


@pytest.fixture(scope="module")
def recorder(tmp_path_factory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the NVTX recorder")
    out = tmp_path_factory.mktemp("nvtx") / "libnvtxrecorder.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", "-o", str(out), str(ROOT / "tests" / "nvtx_recorder.c"), "-lpthread"],
        check=True,
        timeout=120,
    )
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
    r = ddpdoctor(["profile", str(PROBES / "straggler.py"), "--steps", str(STEPS)], tmp_path)
    assert r.code == 0, r.err[-2000:]
    pid_rank = {}
    for d in (r.run_dir / "ranks").iterdir():
        start = json.loads((d / "events.jsonl").read_text().splitlines()[0])
        pid_rank[start["pid"]] = int(d.name)
    by_rank = {
        pid_rank[int(p.stem.split("-")[1])]: parse(p)
        for p in logs.glob("nvtx-*.log")
        if int(p.stem.split("-")[1]) in pid_rank
    }
    assert sorted(by_rank) == [0, 1]
    for rank, rec in by_rank.items():
        names = Counter(s["name"] for s in rec["starts"].values())
        assert names["forward"] == names["backward"] == names["optimizer step"] == STEPS, (rank, names)
        assert names["all_reduce bucket 0"] == STEPS  # DDP's own bucket all-reduce, via the timing comm hook
        assert names["step"] == STEPS + 1  # the last one is still open when the script ends
        assert all(
            rid in rec["ends"] for rid, s in rec["starts"].items() if s["name"] != "step" or s["payload"] < STEPS
        )
        cat_of = {s["name"]: rec["cats"].get(s["cat"]) for s in rec["starts"].values()}
        assert cat_of["forward"] == cat_of["backward"] == "compute"
        assert cat_of["all_reduce bucket 0"] == "comm" and cat_of["optimizer step"] == "optim"
        assert cat_of["step"] is None
        assert sorted(s["payload"] for s in rec["starts"].values() if s["name"] == "step") == list(range(STEPS + 1))
        # nesting: forward, backward and optimizer step open and close inside their step
        pos = {(k, rid): i for i, (k, rid) in enumerate(rec["order"])}
        steps = sorted(
            (rid for rid, s in rec["starts"].items() if s["name"] == "step" and rid in rec["ends"]),
            key=lambda rid: pos[("S", rid)],
        )
        inner = [rid for rid, s in rec["starts"].items() if s["name"] in ("forward", "backward", "optimizer step")]
        for rid in inner:
            assert any(pos[("S", st)] < pos[("S", rid)] and pos[("E", rid)] < pos[("E", st)] for st in steps)
        # the bucket all-reduce ends on gloo's thread: a start/end range, not push/pop
        buckets = [rid for rid, s in rec["starts"].items() if s["name"].startswith("all_reduce bucket")]
        assert any(rec["ends"][rid] != rec["starts"][rid]["tid"] for rid in buckets)


@pytest.fixture(scope="module")
def plain(shared_job):
    """The straggler probe under `profile` with default settings and no NVTX tool (an empty
    NVTX_INJECTION64_PATH is none): one job for every test below that reads a plain profile run."""
    return shared_job.run(["profile", str(PROBES / "straggler.py")], env={"NVTX_INJECTION64_PATH": ""})


@pytest.fixture(scope="module")
def bucket_ranges(shared_job):
    """The same probe with --bucket-ranges; test_html.py reads the same job (shared_job)."""
    return shared_job.run(["profile", "--bucket-ranges", str(PROBES / "straggler.py")])


def test_no_nvtx_call_without_a_tool(plain):
    r = plain
    info = [
        json.loads(l)
        for l in (r.run_dir / "ranks" / "0" / "timeline.jsonl").read_text().splitlines()
        if '"profile_info"' in l
    ]
    assert info and info[0]["nvtx"] is False


def _rank_timeline(run_dir: Path, rank: int) -> list[dict]:
    return [json.loads(l) for l in (run_dir / "ranks" / str(rank) / "timeline.jsonl").read_text().splitlines()]


def test_buckets_from_ddps_own_timers_and_bucket_ranges_on_request(plain, bucket_ranges):
    """By default no comm hook (issue 10: a Python hook costs ~0.1-0.2 ms a step): the buckets and the
    backward's comm time come from DDP's logger; --bucket-ranges adds one range per bucket all-reduce."""
    r = plain
    assert r.code == 0, r.err[-2000:]
    for rank in (0, 1):
        tl = _rank_timeline(r.run_dir, rank)
        assert not [e for e in tl if e.get("kind") == "range" and e["name"].startswith("all_reduce bucket")]
        info = [e for e in tl if e.get("kind") == "profile_info"][-1]
        assert info["bucket_ranges"] is False and len(info["buckets"]) >= 1 and all(b > 0 for b in info["buckets"])
        assert info["ddp"]["comm_ms"] > 0 and info["ddp"]["backward_ms"] > 0
    summary = finding(r.report, "profile.summary")
    assert "DDP's own timers" in summary["message"] and "gradient all-reduce" in summary["message"]
    assert summary["evidence"]["ddp_timers_ms"]["comm_ms"] > 0

    h = bucket_ranges
    assert h.code == 0, h.err[-2000:]
    for rank in (0, 1):
        tl = _rank_timeline(h.run_dir, rank)
        ranges = [e for e in tl if e.get("kind") == "range" and e["name"] == "all_reduce bucket 0"]
        assert len(ranges) == STRAGGLER_STEPS and all(e["cat"] == "comm" and e["t1"] > e["t0"] for e in ranges)
        assert [e for e in tl if e.get("kind") == "profile_info"][-1]["bucket_ranges"] is True


def line_of(path: Path, text: str) -> int:
    """The number of the script line that contains ``text`` (found in the script, not hard-coded)."""
    hits = [i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    assert len(hits) == 1, (text, hits)
    return hits[0]


def roles(f: dict) -> dict[tuple[int, str], set[int]]:
    out: dict[tuple[int, str], set[int]] = defaultdict(set)
    for l in f["locations"]:
        out[(l["rank"], l["role"])].add(l["line"])
    return dict(out)


def test_straggler_rank_phase_and_line(plain):
    script = PROBES / "straggler.py"
    r = plain
    f = finding(r.report, "profile.straggler")
    assert f["severity"] == "warning" and f["culprits"] == [1] and f["ranks"] == [0, 1]
    assert f["evidence"]["rank"] == 1 and f["evidence"]["phase"] == "forward"
    assert 10 <= f["evidence"]["excess_ms"] <= 40
    got = roles(f)
    assert got[(1, "slow")] == {marker_line(script, "SLOW")}
    assert got[(0, "waiting")] == {line_of(script, "        loss.backward()")}  # DDP's all-reduce waits inside backward
    assert f"straggler.py:{marker_line(script, 'SLOW')}" in f["message"]
    assert r.code == 0  # a warning; --fail-on warning makes it fail a CI job


HELPER_STRAGGLER = """\
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def log_metrics(loss, rank):
    if rank == 1:
        time.sleep(0.3)
    return loss.item()


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(8):
        loss = model(torch.randn(16, 32)).pow(2).mean()
        log_metrics(loss, rank)
        loss.backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def test_straggler_sleeping_in_a_helper_between_forward_and_backward(tmp_path):
    """A script written without the tool in mind: rank 1 sleeps 0.3 s in a helper between forward and
    backward. The finding names rank 1 alone as culprit, the sleep, and where rank 0 waits."""
    script = tmp_path / "train.py"
    script.write_text(HELPER_STRAGGLER)
    r = ddpdoctor(["profile", str(script)], tmp_path)
    assert r.code == 0, r.err[-2000:]
    f = finding(r.report, "profile.straggler")
    assert f["severity"] == "warning" and f["culprits"] == [1] and f["ranks"] == [0, 1]
    assert f["evidence"]["phase"] == "other" and 250 <= f["evidence"]["excess_ms"] <= 400
    sleep, call, back = (
        line_of(script, t) for t in ("time.sleep(0.3)", "        log_metrics(loss, rank)", "loss.backward()")
    )
    got = roles(f)
    assert got[(1, "slow")] <= {sleep, call} and got[(1, "slow")]
    assert got[(0, "waiting")] == {back}
    assert f"train.py:{sleep}" in f["message"] and "between forward and backward" in f["message"]
    assert "`time.sleep(0.3)`" in f["message"]


def test_dataloader_bound_names_getitem_and_the_loop(tmp_path):
    script = PROBES / "dataloader_bound.py"
    r = ddpdoctor(["profile", "--fail-on", "warning", str(script)], tmp_path)
    f = finding(r.report, "profile.dataloader-bound")
    assert f["ranks"] == [0, 1] and f["culprits"] == [0, 1]
    getitem = line_of(script, "time.sleep(0.002)")  # num_workers=0: __getitem__ runs in the training process
    for rank in (0, 1):
        assert lines_of(f, rank) == {getitem, marker_line(script, "LOOP")}
        assert roles(f)[(rank, "slow")] == {getitem}
    assert f"dataloader_bound.py:{getitem}" in f["message"]
    assert r.code == 1


# -- pure: hand-built timelines -----------------------------------------------------------------------


def _timeline(b: RunBuilder, rank: int, steps: list[dict[str, float]], sample_rows: list | None = None) -> None:
    """Ranges of ``steps`` (ms per phase: data, forward, other, backward, optimizer) on one main thread."""
    t = 1_000_000_000
    for i, ph in enumerate(steps):
        t0 = t
        for name, key in (
            ("dataloader wait", "data"),
            ("forward", "forward"),
            (None, "other"),
            ("backward", "backward"),
            ("optimizer step", "optimizer"),
        ):
            d = int(ph.get(key, 0.0) * 1e6)
            if name:
                b.add(
                    rank, "timeline.jsonl", "range", 1.0, name=name, cat="compute", tid=7, t0=t, t1=t + d, payload=None
                )
            t += d
        b.add(rank, "timeline.jsonl", "range", 1.0, name="step", cat=None, tid=7, t0=t0, t1=t, payload=i)
    if sample_rows:
        b.add(rank, "timeline.jsonl", "samples", 2.0, period_s=0.005, step=len(steps), first_step=1, rows=sample_rows)


def test_scheduling_noise_is_no_straggler(tmp_path):
    """Two healthy ranks on a busy 2-core host: phases jitter by up to 4 ms a step and rank 1, scheduled less,
    spends 3 ms more per step between forward and backward. Below the 5 ms floor: no straggler."""
    import random

    rng = random.Random(3)
    b = RunBuilder(tmp_path / "run", command="profile")
    for rank in (0, 1):
        b.start(rank)
        _timeline(
            b,
            rank,
            [
                {
                    "data": 0.4 + 4 * rng.random(),
                    "forward": 0.5 + 4 * rng.random(),
                    "other": 0.5 + 3 * rank + 4 * rng.random(),
                    "backward": 2.0 + 3 * rng.random(),
                    "optimizer": 0.2 + 3 * rng.random(),
                }
                for _ in range(30)
            ],
        )
    ids = [f.id for f in profile_analysis.detect(load_run(str(b.root)), Config())]
    assert "profile.straggler" not in ids and all(
        f.severity != "error" for f in profile_analysis.detect(load_run(str(b.root)), Config())
    )


def test_straggler_at_scale_groups_ranks_and_names_culprits_only(tmp_path):
    """64 ranks, ranks 5 and 9 spend 40 ms more in forward at model.py:12: culprits [5,9], a short message,
    a bounded list of locations."""
    b = RunBuilder(tmp_path / "run", command="profile")
    for rank in range(64):
        b.start(rank)
        slow = rank in (5, 9)
        steps = [
            {"data": 1, "forward": 45 if slow else 5, "other": 1, "backward": 5 if slow else 45, "optimizer": 1}
            for _ in range(20)
        ]
        rows = [["forward", "/w/model.py", 20, "forward", "/w/train.py", 30, 10, "y = self.body(x)"]]
        if slow:
            rows.append(["forward", "/w/model.py", 12, "forward", "/w/train.py", 30, 80, "self.log_activations(x)"])
        rows.append(["backward", "/w/train.py", 31, "main", None, None, 40 if not slow else 5, "loss.backward()"])
        _timeline(b, rank, steps, rows)
    f = next(f for f in profile_analysis.detect(load_run(str(b.root)), Config()) if f.id == "profile.straggler")
    assert f.culprits == (5, 9) and f.ranks == tuple(range(64))
    assert {(l.rank, l.line) for l in f.locations if l.role == "slow"} == {(5, 12), (9, 12)}
    waiting = [l for l in f.locations if l.role == "waiting"]
    assert {l.line for l in waiting} == {31} and len(waiting) <= 4
    assert "2 ranks [5,9]" in f.message and "62 ranks [0-4,6-8,10-63]" in f.message and "model.py:12" in f.message
    assert len(f.message) < 400


TRACE_SCHEMA = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "traceEvents": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "ph", "pid", "tid"],
                "properties": {
                    "name": {"type": "string"},
                    "ph": {"enum": ["X", "M", "B", "E", "i", "C"]},
                    "pid": {"type": "integer"},
                    "tid": {"type": "integer"},
                    "ts": {"type": "number"},
                    "dur": {"type": "number", "minimum": 0},
                    "cat": {"type": "string"},
                    "args": {"type": "object"},
                },
                "allOf": [
                    {"if": {"properties": {"ph": {"const": "X"}}}, "then": {"required": ["ts", "dur", "cat"]}},
                    {"if": {"properties": {"ph": {"const": "M"}}}, "then": {"required": ["args"]}},
                ],
            },
        },
        "displayTimeUnit": {"enum": ["ms", "ns"]},
    },
}


def test_healthy_profile_and_its_trace_file(shared_job):
    """test_compare.py reads the same job (shared_job)."""
    r = shared_job.run(["profile", "--probe", "healthy", "--", "--epochs", "6"])
    assert r.code == 0
    assert [
        f["id"] for f in r.report["findings"] if f["severity"] != "note" and not f["id"].startswith("teardown.")
    ] == []
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
    r = ddpdoctor(["profile", "--nsys", "--probe", "healthy"], tmp_path, json_report=False)
    assert r.code == 4
    assert r.err.strip().startswith("ddpdoctor: error: nsys (Nsight Systems) is not on PATH")
    assert len(r.err.strip().splitlines()) == 1


def test_a_rank_waiting_for_data_is_dataloader_bound_not_a_straggler(tmp_path):
    """Both ranks read through one slow worker each; rank 1's worker is a batch behind, so rank 1 waits for
    data (92 %) and rank 0 waits for rank 1 in its all-reduce. The DataLoader sets the pace: one
    profile.dataloader-bound naming rank 1 (its loop) and where rank 0 waits, no profile.straggler."""
    b = RunBuilder(tmp_path / "run", command="profile")
    for rank, (data, back) in enumerate(((9.0, 25.0), (32.0, 2.0))):
        b.start(rank)
        b.add(rank, "events.jsonl", "dataloader", 0.5, len=32, site=["/w/train.py", 25, "main"])
        rows = [
            ["data", "/w/train.py", 25, "main", None, None, int(data), "for x, y in loader:"],
            ["backward", "/w/train.py", 26, "main", None, None, int(back), "loss.backward()"],
        ]
        _timeline(
            b, rank, [{"data": data, "forward": 0.4, "other": 0.5, "backward": back, "optimizer": 0.1}] * 30, rows
        )
    found = {f.id: f for f in profile_analysis.detect(load_run(str(b.root)), Config())}
    assert "profile.straggler" not in found
    f = found["profile.dataloader-bound"]
    assert f.culprits == (1,) and f.ranks == (0, 1)
    assert {(l.rank, l.line, l.role) for l in f.locations} == {(1, 25, "slow"), (0, 26, "waiting")}
    assert "rank 0 waits for it in backward" in f.message


LONG_LOOP = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(4, 8)
for step in range(1250):
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
"""


@pytest.mark.extended  # one of the README tier's slowest jobs (stop 57: the tier read 554-562 s)
def test_a_long_run_keeps_every_step_up_to_1000_then_blocks_of_ten(tmp_path):
    """A long profile run's timeline stays small (issue 10): every step's ranges up to step 1,000, then
    one block of 10 consecutive steps in 10, the same steps on every rank; the verdict, the step count
    and the breakdown are those of every step."""
    script = tmp_path / "train.py"
    script.write_text(LONG_LOOP)
    r = ddpdoctor(["profile", str(script)], tmp_path, timeout=240)
    assert r.code == 0, r.err[-2000:]
    assert [
        f["id"] for f in r.report["findings"] if f["severity"] != "note" and not f["id"].startswith("teardown.")
    ] == []
    assert "profile.summary" in {f["id"] for f in r.report["findings"]}
    want = set(range(1000)) | {b + i for b in (1000, 1100, 1200) for i in range(10)}
    for rank in (0, 1):
        lines = [json.loads(l) for l in (r.run_dir / "ranks" / str(rank) / "timeline.jsonl").read_text().splitlines()]
        steps = {e["payload"] for e in lines if e["kind"] == "range" and e["name"] == "step"}
        assert steps == want
        forwards = [e for e in lines if e["kind"] == "range" and e["name"] == "forward"]
        assert len(forwards) == len(want)
        info = [e for e in lines if e["kind"] == "profile_info"][-1]
        assert info["steps"] == 1250 and info["kept_steps"] == len(want) and info["forwards"] == 1250
