"""`ddpdoctor doctor` as a health check: environment, every collective on every rank, bandwidth, findings."""

from __future__ import annotations

import pytest

from ddpdoctor.health import analyze


def _rank(r: int, detail_bad: bool = False, unsupported: bool = False) -> dict:
    rows = [
        {"op": "all_reduce sum", "dtype": "float32", "bytes": 16396, "ok": True, "detail": "", "seconds": 0.01},
        {"op": "reduce_scatter", "dtype": "float32", "bytes": 8248, "ok": True, "detail": "", "seconds": 0.01},
    ]
    if detail_bad:
        rows[0].update(ok=False, detail="1 of 4099 elements wrong; first at index 7: 3 instead of 9")
    if unsupported:
        rows[1].update(
            ok=None,
            supported=False,
            raised=True,
            detail="RuntimeError: ProcessGroupGloo does not support reduce_scatter",
        )
    return {
        "rank": r,
        "stage": "done",
        "world_size": 4,
        "error": None,
        "clock": 1000.0,
        "env": {"host": "h"},
        "collectives": rows,
        "bandwidth": [
            {"op": "all_reduce", "bytes": 1 << 20, "iters": 5, "time_s": 0.001 * (1 + (r == 2))},
            {"op": "all_gather", "bytes": 1 << 20, "iters": 5, "time_s": 0.001},
        ],
    }


def test_wrong_result_unsupported_op_and_busbw_floor_from_rank_results():
    ranks = {r: _rank(r, detail_bad=(r == 3), unsupported=True) for r in range(4)}
    coll = analyze.merge_collectives(ranks, "gloo")
    rs = next(c for c in coll if c["op"] == "reduce_scatter")
    assert rs["ok"] is None and rs["detail"] == "not supported by gloo"
    ar = next(c for c in coll if c["op"] == "all_reduce sum")
    assert ar["ok"] is False and ar["wrong_ranks"] == [3]
    bw = analyze.merge_bandwidth(ranks, 4)
    a = next(b for b in bw if b["op"] == "all_reduce")
    # the slowest rank's time; busbw = algbw * 2(n-1)/n for all_reduce, (n-1)/n for all_gather
    assert a["slowest_rank"] == 2 and a["algbw_gbps"] == pytest.approx((1 << 20) / 0.002 / 1e9, rel=1e-3)
    assert a["busbw_gbps"] == pytest.approx(a["algbw_gbps"] * 1.5, rel=1e-3)
    g = next(b for b in bw if b["op"] == "all_gather")
    assert g["busbw_gbps"] == pytest.approx(g["algbw_gbps"] * 0.75, rel=1e-3)
    fs = analyze.findings(ranks, 4, coll, bw, "gloo", 10.0, None, "", set())
    by = {f.id: f for f in fs}
    assert set(by) == {"doctor.collective-wrong", "doctor.low-busbw"}
    assert by["doctor.collective-wrong"].culprits == (3,) and "index 7" in by["doctor.collective-wrong"].message
    assert by["doctor.low-busbw"].culprits == (2,) and "below --min-busbw 10" in by["doctor.low-busbw"].message


def test_launch_errors_are_classified():
    c = analyze.classify(
        "[W1130 21:55:14.788 socket.cpp:764] [c10d] The client socket has failed to connect to "
        "[::ffff:192.0.2.99]:29544 (errno: 113 - No route to host)."
    )
    assert c and c[0] == "doctor.master-unreachable" and c[3].startswith("The client socket")
    assert analyze.classify("RuntimeError: ... Unable to find address for: eth9")[0] == "doctor.socket-ifname"
    assert analyze.classify("EADDRINUSE: address already in use")[0] == "doctor.port-in-use"
    init = {
        r: {
            "rank": r,
            "stage": "init",
            "error": {
                "stage": "init",
                "type": "RuntimeError",
                "message": "[enforce fail] Unable to find address for: eth9",
            },
        }
        for r in (0, 1)
    }
    fs = analyze.findings(init, 2, [], [], "gloo", None, None, "", set())
    assert [f.id for f in fs] == ["doctor.socket-ifname"] and "eth9" in fs[0].message and fs[0].culprits == (0, 1)
    assert analyze.findings(init, 2, [], [], "gloo", None, None, "", {"doctor.socket-ifname"}) == []
    fs = analyze.findings({}, 2, [], [], "gloo", None, 20.0, "something else", set())
    assert [f.id for f in fs] == ["doctor.launch-failed"] and "within 20 s" in fs[0].message
