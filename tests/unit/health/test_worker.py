"""The doctor's per-rank checks (health/worker.py) on a stand-in process group of one rank: a correct
backend passes every collective; one whose all_reduce adds a little is a wrong result with the first bad
element; one that raises "not supported" is marked unsupported, not failed; the sweep times each op."""

from __future__ import annotations

import types
from typing import Any

import torch

from ddpdoctor.health.worker import _same, _unsupported, _values, correctness, sweep


def _dist(**override: Any) -> Any:
    """torch.distributed's calls for a world of one rank (each a copy or nothing)."""
    d = types.SimpleNamespace(
        ReduceOp=types.SimpleNamespace(SUM="sum", MAX="max", MIN="min"),
        all_reduce=lambda t, op=None: None,
        all_gather=lambda bufs, t: bufs[0].copy_(t),
        reduce_scatter_tensor=lambda out, inp: out.copy_(inp),
        all_gather_into_tensor=lambda out, inp: out.copy_(inp),
        broadcast=lambda t, src: None,
        all_to_all_single=lambda out, inp, recv, send: out.copy_(inp),
        barrier=lambda: None,
    )
    for k, v in override.items():
        setattr(d, k, v)
    return d


def _run(dist: Any) -> dict[str, dict]:
    rows = correctness(torch, dist, 0, 1, "cpu", [torch.float32], lambda: None)
    return {r["op"]: r for r in rows}


def test_values_differ_by_rank_and_compare_exactly() -> None:
    a, b = _values(torch, 0, 8, torch.float32, "cpu"), _values(torch, 1, 8, torch.float32, "cpu")
    assert a.tolist() == [1, 2, 3, 4, 5, 6, 7, 1] and not torch.equal(a, b)
    assert _same(torch, a, a.double()) == (True, "")
    assert _same(torch, a[:4], a) == (False, "shape [4] instead of [8]")
    assert _unsupported(RuntimeError("ProcessGroupGloo does not support reduce_scatter")) and not _unsupported(
        ValueError("x")
    )


def test_a_correct_backend_passes_every_check() -> None:
    rows = _run(_dist())
    assert set(rows) == {
        "all_reduce sum",
        "all_reduce max",
        "all_gather",
        "reduce_scatter",
        "broadcast",
        "all_to_all",
        "send_recv",
        "barrier",
    }
    assert all(r["ok"] is True for r in rows.values()), rows
    assert rows["send_recv"]["detail"] == "one rank: nothing to send" and rows["all_reduce sum"]["dtype"] == "float32"


def test_a_wrong_all_reduce_is_a_wrong_result_not_an_error() -> None:
    rows = _run(_dist(all_reduce=lambda t, op=None: t.add_(1)))
    bad = rows["all_reduce sum"]
    assert bad["ok"] is False and "raised" not in bad
    assert bad["detail"].endswith("elements wrong; first at index 0: 2 instead of 1")
    assert rows["broadcast"]["ok"] is True


def test_an_unsupported_op_is_marked_so() -> None:
    def no(*a: Any, **k: Any) -> None:
        raise RuntimeError("reduce_scatter is not supported by this backend\nmore")

    row = _run(_dist(reduce_scatter_tensor=no))["reduce_scatter"]
    assert row["ok"] is None and row["supported"] is False and row["raised"] is True
    assert row["detail"] == "RuntimeError: reduce_scatter is not supported by this backend"


def test_the_sweep_times_each_op_and_stops_an_op_at_its_first_failure() -> None:
    def no(*a: Any, **k: Any) -> None:
        raise RuntimeError("boom")

    dist = _dist(all_gather_into_tensor=no)
    dist.all_reduce = lambda t, op=None: None
    rows = sweep(torch, dist, 0, 1, "cpu", [1024, 4096], lambda: None)
    ops = [(r["op"], r["bytes"]) for r in rows]
    assert ops == [("all_reduce", 1024), ("all_reduce", 4096), ("all_gather", 1024), ("reduce_scatter", 1024),
                   ("reduce_scatter", 4096), ("broadcast", 1024), ("broadcast", 4096)]  # fmt: skip
    assert rows[2] == {"op": "all_gather", "bytes": 1024, "error": "RuntimeError: boom", "supported": True}
    assert all(r["time_s"] >= 0 and r["iters"] >= 2 for r in rows if "error" not in r)
