"""One rank's timeline read as steps (analysis/profile/steps.py): the ms of each phase, a Python
collective as its own phase unless inside another, the typical steady step after warm-up, and the line samples
turned into ms per step."""

from __future__ import annotations

import pytest
import timelines
from timelines import MS

from ddpdoctor.analysis.profile.steps import (
    Hot,
    _between,
    _code,
    _line_phrase,
    _step_order,
    breakdown,
    fsdp_comm,
    samples_of,
    steady,
    typical,
)
from ddpdoctor.record.reader import RankRecord, RunRecord


def test_each_step_is_split_into_its_phases_in_ms() -> None:
    rows = breakdown(timelines.steps(3, collective=4))
    assert len(rows) == 3
    assert rows[0] == {
        "data": 2.0,
        "forward": 10.0,
        "backward+comm": 20.0,
        "optimizer": 5.0,
        "collective": 4.0,
        "other": 3.0,
        "step": 44.0,
    }


def test_a_collective_inside_forward_is_not_counted_twice() -> None:
    tl = timelines.steps(1)
    fwd = next(e for e in tl if e["name"] == "forward")
    tl.append(
        {"kind": "range", "name": "all_reduce", "cat": "comm", "tid": 1, "t0": fwd["t0"] + MS, "t1": fwd["t0"] + 2 * MS}
    )
    (row,) = breakdown(tl)
    assert row["collective"] == 0.0 and row["forward"] == 10.0 and row["other"] == 3.0


def test_ddp_bucket_all_reduces_and_other_threads_are_not_collectives() -> None:
    tl = timelines.steps(1, other=10)
    end = next(e for e in tl if e["name"] == "optimizer step")["t1"]
    tl.append({"kind": "range", "name": "all_reduce bucket 0", "cat": "comm", "tid": 1, "t0": end, "t1": end + MS})
    tl.append({"kind": "range", "name": "all_reduce", "cat": "comm", "tid": 99, "t0": end, "t1": end + MS})
    (row,) = breakdown(tl)
    assert row["collective"] == 0.0 and row["other"] == 10.0


def test_steady_drops_the_first_fifth() -> None:
    rows = [{"step": float(i)} for i in range(10)]
    assert [r["step"] for r in steady(rows)] == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    assert steady(rows[:2]) == rows[:2]  # too few to drop any


def test_the_typical_step_per_rank_ignores_a_slow_warm_up_step() -> None:
    tl0 = timelines.steps(1, forward=500) + [
        {**e, "t0": e["t0"] + 600 * MS, "t1": e["t1"] + 600 * MS} for e in timelines.steps(9)
    ]
    rec = RunRecord("/run", {}, {0: RankRecord(0, timeline=tl0), 1: RankRecord(1, timeline=[])}, [])
    med = typical(rec)
    assert list(med) == [0]
    assert med[0]["forward"] == 10.0 and med[0]["step"] == 40.0 and med[0]["steps"] == 8.0


def test_samples_become_ms_per_step_by_their_share_of_the_phase() -> None:
    s = samples_of(
        [
            timelines.samples(
                [
                    ("forward", "/w/train.py", 40, "main", 30, "out = model(x)  # the model"),
                    ("forward", "/w/train.py", 41, "main", 10, "loss = crit(out)"),
                    ("other:forward", "/w/train.py", 50, "main", 4, "log(loss)"),
                    ("bogus", "/w/train.py", 60, "main", 99, ""),
                ]
            )
        ]
    )
    (h1, h2) = s.hot("forward", 20.0)
    assert (h1.line, h1.count, h1.ms, h1.text) == (40, 30, 15.0, "out = model(x)")
    assert (h2.line, h2.ms) == (41, 5.0)
    assert s.ms_at("forward", ("/w/train.py", 41), 20.0) == 5.0
    (o,) = s.hot("other", 8.0)
    assert o.after == "forward" and o.ms == 8.0
    assert s.total["other"] == 4 and "bogus" not in s.total


def test_step_order_and_the_words_for_other_time() -> None:
    order = _step_order(timelines.steps(5))
    assert order == ["dataloader wait", "forward", "backward", "optimizer step"]
    assert _between("forward", order) == "between forward and backward"
    assert _between("optimizer", order) == "between optimizer step and data loading"
    assert _between("", order) == "before data loading"


def test_code_drops_a_trailing_comment_but_not_a_hash_in_a_string() -> None:
    assert _code("x = f(y)  # why") == "x = f(y)"
    assert _code("s = '#not a comment'") == "s = '#not a comment'"


@pytest.mark.parametrize(
    "hot, phrase",
    [
        (
            Hot("/w/train.py", 40, "main", 5, 12.4, "out = model(x)"),
            "train.py:40 in main (`out = model(x)`, ~12 ms/step)",
        ),
        (Hot("/w/train.py", 40, "<module>", 5, 0.4), "train.py:40"),
        (
            Hot("/w/lib.py", 7, "slow", 5, 3.0, caller=("/w/train.py", 40)),
            "lib.py:7 in slow (~3 ms/step), called from train.py:40",
        ),
    ],
)
def test_a_hot_line_reads_as_file_line_function_and_ms(hot: Hot, phrase: str) -> None:
    assert _line_phrase(hot) == phrase


def _range(name: str, t0: float, t1: float, cat: str | None = None, payload: int | None = None) -> dict:
    return {
        "kind": "range",
        "name": name,
        "cat": cat,
        "tid": 1,
        "t0": int(t0 * MS),
        "t1": int(t1 * MS),
        "payload": payload,
    }


def test_fsdp2_collectives_are_parts_of_forward_and_backward_with_their_own_median() -> None:
    """FSDP2's all-gathers and reduce-scatters (issue 51) lie inside forward and backward: no "collective"
    phase, and their own ms per steady step (the first step, the warm-up, left out)."""
    tl = []
    for i in range(6):
        t = 100.0 * i
        ag = 30.0 if i == 0 else 3.0 + i % 2  # 3 or 4 ms after the warm-up's 30
        tl += [
            _range("step", t, t + 50, payload=i),
            _range("forward", t, t + 10, "compute"),
            _range("fsdp all-gather", t + 1, t + 1 + ag, "comm"),
            _range("backward", t + 10, t + 40, "compute"),
            _range("fsdp reduce-scatter", t + 20, t + 22, "comm"),
        ]
    rows = breakdown(tl)
    assert all(r["collective"] == 0.0 for r in rows)
    assert [r["forward"] for r in rows] == [10.0] * 6
    assert fsdp_comm(tl) == {"all-gather": 4.0, "reduce-scatter": 2.0}  # median of 4, 3, 4, 3, 4
    assert fsdp_comm(timelines.steps(3)) == {}
