"""ddpdoctor's own cost (analysis/cost.py) from a hand-built run directory: each rank's account in its
finish event (else its last heartbeat) per DDP step and as a share of the step, the median rank's figures,
the monitor's CPU time per step; the JSON and HTML reports carry the same figures as the text line."""

from __future__ import annotations

import json
from pathlib import Path

from builder import RunBuilder

from ddpdoctor.analysis import cost, diagnose
from ddpdoctor.analysis.config import Config
from ddpdoctor.record.reader import load_run
from ddpdoctor.render import json_report, text
from ddpdoctor.render.html import page


def _run(root: Path) -> RunBuilder:
    b = RunBuilder(root, command="hang")
    for r, train_us in ((0, 3_000), (1, 5_000)):
        b.start(r)  # init at t=0.1
        b.hb(r, 1.0, 10, step=500, cost={"train_us": 1, "bg_us": 1, "exact_us": 0, "calls": 1, "timed": 0})
        # 1000 steps over 2 s: a 2 ms step; the finish event's account wins over the heartbeat's
        b.add(
            r,
            "events.jsonl",
            "finish",
            2.1,
            code=0,
            ddp_fwd=1000,
            ncoll=1000,
            seq={"0": 1000},
            exception=False,
            cost={"train_us": train_us, "bg_us": 20_000, "exact_us": 0, "calls": 4000, "timed": 307, "gc_skipped": r},
        )
    b.add(None, "monitor.jsonl", "exit", 2.5, returncode=0, cpu_s=0.05)
    return b


def test_the_cost_per_step_is_the_median_ranks_with_its_share_of_the_step(tmp_path: Path) -> None:
    _run(tmp_path)
    c = cost.compute(load_run(str(tmp_path)))
    assert c["ranks"]["0"]["train_us_per_step"] == 3.0 and c["ranks"]["1"]["train_us_per_step"] == 5.0
    assert c["train_us_per_step"] == 4.0 and abs(c["step_ms"] - 2.0) < 1e-9
    assert [c["ranks"][r]["gc_skipped"] for r in ("0", "1")] == [0, 1]
    assert abs(c["train_pct"] - 0.2) < 1e-9 and c["background_us_per_step"] == 20.0
    assert abs(c["monitor_us_per_step"] - 50.0) < 1e-9 and abs(c["monitor_pct"] - 2.5) < 1e-9
    assert cost.line(c) == (
        "ddpdoctor's cost: 4.0 µs/step on the training thread (0.20 % of a 2.00 ms step), background 20.0 "
        "µs/step (1.0 %), monitor 50.0 µs/step (2.5 %)"
    )


def test_every_report_form_states_the_cost(tmp_path: Path) -> None:
    _run(tmp_path)
    record = load_run(str(tmp_path))
    report = diagnose(record, Config(), "hang")
    want = cost.line(report.cost)
    assert want.startswith("ddpdoctor's cost: 4.0 µs/step")
    assert f"  {want}\n" in text.render(report)
    doc = json.loads(json_report.render(report))
    assert doc["cost"]["train_us_per_step"] == 4.0 and doc["cost"]["ranks"]["1"]["steps"] == 1000
    doc_html = page.render(report, record)
    assert 'id="cost"' in doc_html and "4.0 µs/step on the training thread" in doc_html


def test_a_rank_without_a_finish_event_is_read_from_its_last_heartbeat(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path, command="hang")
    b.start(0)
    b.hb(0, 1.1, 10, step=100, cost={"train_us": 500, "bg_us": 100, "exact_us": 0, "calls": 300, "timed": 23})
    c = cost.compute(load_run(str(tmp_path)))
    assert c["train_us_per_step"] == 5.0 and abs(c["step_ms"] - 10.0) < 1e-9 and "monitor_us_per_step" not in c
    assert cost.compute(load_run(str(RunBuilder(tmp_path / "old", command="hang").start(0).root))) == {}


def test_the_monitors_cost_per_step_counts_from_the_ranks_first_step(tmp_path: Path) -> None:
    """Its start (imports, torchrun's launch) is no cost per step: the per-step figure is its CPU time
    since the loop began; the whole of it stays in the JSON."""
    b = _run(tmp_path)
    (tmp_path / "monitor.jsonl").unlink()
    b.add(None, "monitor.jsonl", "exit", 2.5, returncode=0, cpu_s=0.45, cpu_loop_s=0.02)
    c = cost.compute(load_run(str(tmp_path)))
    assert c["monitor_cpu_s"] == 0.45 and c["monitor_loop_cpu_s"] == 0.02
    assert abs(c["monitor_us_per_step"] - 20.0) < 1e-9 and abs(c["monitor_pct"] - 1.0) < 1e-9
