"""perf.grad-accum-no-sync: optimizer steps that each all-reduced several micro-steps are a warning with
the wasted all-reduces and megabytes; one synced micro-step per optimizer step is fine."""

from __future__ import annotations

from ddpdoctor.analysis.check.perf import detect
from ddpdoctor.analysis.config import Config
from ddpdoctor.record.reader import RankRecord, RunRecord


def _rank(micro: list[int], param_bytes: int = 4_000_000) -> list[dict]:
    ddp = {"kind": "ddp", "model": 0, "param_bytes": param_bytes}
    steps = [{"kind": "optstep", "micro": m, "site": ["/work/train.py", 77, "main"]} for m in micro]
    return [ddp, *steps]


def _record(checks: dict[int, list[dict]]) -> RunRecord:
    return RunRecord("/run", {"command": "check"}, {r: RankRecord(r, checks=c) for r, c in checks.items()}, [])


def test_one_synced_micro_step_per_optimizer_step_is_fine() -> None:
    assert detect(_record({0: _rank([1, 1, 1, 1]), 1: _rank([1, 1, 1, 1])}), Config()) == []


def test_a_single_optimizer_step_is_too_little_to_judge() -> None:
    assert detect(_record({0: _rank([4]), 1: _rank([4])}), Config()) == []


def test_every_micro_step_synced_is_a_warning_with_the_waste() -> None:
    (f,) = detect(_record({0: _rank([4, 4, 4]), 1: _rank([4, 4, 4])}), Config())
    assert f.id == "perf.grad-accum-no-sync" and f.severity == "warning"
    assert f.culprits == (0, 1)
    assert "over 4 micro-steps" in f.message and "3 of 4 all-reduces per optimizer step are wasted" in f.message
    assert "(~12.00 MB of gradients per step per rank)" in f.message
    assert f.evidence == {"micro_steps": 4, "wasted_bytes_per_step": 12_000_000}
    assert [(l.rank, l.line, l.role) for l in f.locations] == [(0, 77, "optimizer step"), (1, 77, "optimizer step")]


def test_the_median_decides_so_one_odd_step_does_not() -> None:
    assert detect(_record({0: _rank([1, 1, 8]), 1: _rank([1, 1, 1])}), Config()) == []
    (f,) = detect(_record({0: _rank([2, 2, 1]), 1: _rank([1, 1, 1])}), Config())
    assert f.culprits == (0,) and "over 2 micro-steps" in f.message
