"""The Chrome/Perfetto trace (render/perfetto.py): one process per rank with its name, one named track per
thread, every range a complete event in microseconds from the earliest range of the run."""

from __future__ import annotations

import json

import timelines

from ddpdoctor.record.reader import RankRecord, RunRecord
from ddpdoctor.render.perfetto import render, trace


def _record() -> RunRecord:
    tl0 = timelines.steps(2, rank=0, tid=11) + [timelines.info(main_tid=11)]
    tl1 = [{**e, "t0": e["t0"] + 5_000, "t1": e["t1"] + 5_000} for e in timelines.steps(1, rank=1, tid=22)]
    tl1.append({"kind": "range", "name": "step", "cat": None, "tid": 23, "t0": 10_000, "t1": 9_000, "payload": 7})
    return RunRecord("/run", {}, {1: RankRecord(1, timeline=tl1), 0: RankRecord(0, timeline=tl0)}, [])


def test_each_rank_is_a_process_and_each_thread_a_named_track() -> None:
    ev = trace(_record())["traceEvents"]
    meta = [(e["name"], e["pid"], e["tid"], e["args"]) for e in ev if e["ph"] == "M"]
    assert ("process_name", 0, 0, {"name": "rank 0"}) in meta and ("process_name", 1, 0, {"name": "rank 1"}) in meta
    assert ("thread_name", 0, 11, {"name": "main"}) in meta
    assert ("thread_name", 1, 22, {"name": "thread 22"}) in meta


def test_ranges_are_complete_events_in_microseconds_from_the_first_range() -> None:
    ev = [e for e in trace(_record())["traceEvents"] if e["ph"] == "X"]
    first_fwd = next(e for e in ev if e["pid"] == 0 and e["name"] == "forward")
    assert first_fwd["ts"] == 2000.0 and first_fwd["dur"] == 10_000.0 and first_fwd["cat"] == "compute"
    assert min(e["ts"] for e in ev) == 0.0
    odd = next(e for e in ev if e["tid"] == 23)
    assert odd["name"] == "step 7" and odd["cat"] == "step" and odd["dur"] == 0.0  # never negative
    assert sum(1 for e in ev if e["pid"] == 0 and e["name"] == "step") == 2


def test_render_is_one_line_of_json() -> None:
    out = render(_record())
    assert out.endswith("\n") and out.count("\n") == 1
    assert json.loads(out)["displayTimeUnit"] == "ms"
    empty = json.loads(render(RunRecord("/run", {}, {}, [])))
    assert empty["traceEvents"] == []
