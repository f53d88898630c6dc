"""The doctor's results judged (health/analyze.py): collectives merged across ranks (wrong result vs
raised vs missing), bandwidth with nccl-tests' bus factors and the slowest rank, launch errors classified,
and the findings: healthy gives none; a wrong all_reduce, a rank that could not join, a hang, clock skew
and low bus bandwidth each name their ranks."""

from __future__ import annotations

from typing import Any

from ddpdoctor.health.analyze import classify, findings, merge_bandwidth, merge_collectives


def _ok(op: str = "all_reduce", dtype: str = "float32", **kw: Any) -> dict:
    return {"op": op, "dtype": dtype, "bytes": 1024, "ok": True, "seconds": 0.01, **kw}


def _judge(ranks: dict[int, dict], world: int | None = None, min_busbw: float | None = None, **kw: Any) -> list:
    colls = merge_collectives(ranks, "gloo")
    bw = merge_bandwidth(ranks, len(ranks))
    return findings(
        ranks, world or len(ranks), colls, bw, "gloo", min_busbw, kw.get("timed_out"), kw.get("log", ""), set()
    )


def _rank(r: int, **kw: Any) -> dict:
    return {"world_size": 2, "stage": "done", "collectives": [_ok()], **kw}


def test_healthy_ranks_give_no_findings() -> None:
    assert _judge({0: _rank(0), 1: _rank(1)}) == []


def test_collectives_merge_wrong_raised_and_missing() -> None:
    ranks = {
        0: {"collectives": [_ok(), _ok("broadcast")]},
        1: {
            "collectives": [
                _ok(ok=False, detail="got 3.0, expected 2.0"),
                _ok("broadcast", ok=False, raised=True, detail="timeout"),
            ]
        },
        2: {"collectives": [_ok()]},
    }
    ar, bc = merge_collectives(ranks, "gloo")
    assert (
        ar["ok"] is False
        and ar["wrong_ranks"] == [1]
        and ar["detail"] == "wrong result on rank 1: got 3.0, expected 2.0"
    )
    assert bc["failed_ranks"] == [1] and bc["missing_ranks"] == [2]
    assert bc["detail"] == "raised on rank 1: timeout; no result from rank 2"
    unsup = merge_collectives({0: {"collectives": [_ok("all_gather", supported=False)]}}, "gloo")[0]
    assert unsup["ok"] is None and unsup["detail"] == "not supported by gloo"


def test_bandwidth_uses_the_slowest_rank_and_the_bus_factor() -> None:
    ranks = {
        0: {"bandwidth": [{"op": "all_reduce", "bytes": 10**9, "time_s": 0.5, "iters": 5}]},
        1: {"bandwidth": [{"op": "all_reduce", "bytes": 10**9, "time_s": 1.0, "iters": 5}]},
    }
    (row,) = merge_bandwidth(ranks, 2)
    assert row["algbw_gbps"] == 1.0 and row["busbw_gbps"] == 1.0  # 2(n-1)/n = 1 for n = 2
    assert row["slowest_rank"] == 1 and row["time_us"] == 1e6 and row["fastest_us"] == 5e5
    (row4,) = merge_bandwidth(ranks, 4)
    assert row4["busbw_gbps"] == 1.5


def test_launch_errors_are_classified() -> None:
    fid, what, _hint, line = classify("[W1203 10:00:00.1 socket.cpp:12] [c10d] Unable to find address for: eth9\n")
    assert (fid, what, line) == (
        "doctor.socket-ifname",
        "the socket interface eth9 does not exist on a node",
        "Unable to find address for: eth9",
    )
    assert classify("RuntimeError: Address already in use")[0] == "doctor.port-in-use"
    assert classify("torch.distributed.DistStoreError: Connection refused")[0] == "doctor.master-unreachable"
    assert classify("all good") is None


def test_a_wrong_result_names_the_rank() -> None:
    bad = _rank(1, collectives=[_ok(ok=False, detail="got 3.0, expected 2.0")])
    (f,) = _judge({0: _rank(0), 1: bad})
    assert f.id == "doctor.collective-wrong" and f.culprits == (1,)
    assert (
        f.message
        == "all_reduce returns a wrong result (float32) on rank 1: wrong result on rank 1: got 3.0, expected 2.0"
    )


def test_a_rank_that_could_not_join_and_one_stuck() -> None:
    err = {"stage": "init", "type": "DistNetworkError", "message": "Connection refused by 10.0.0.1:29500"}
    found = _judge({0: _rank(0), 1: {"world_size": 2, "error": err}}, timed_out=30.0)
    assert found[0].id == "doctor.master-unreachable" and found[0].culprits == (1,)
    assert "rank 1 could not join the process group (DistNetworkError: Connection refused" in found[0].message
    (hang,) = [
        f for f in _judge({0: _rank(0), 1: _rank(1, stage="all_reduce")}, timed_out=30.0) if f.id == "doctor.hang"
    ]
    assert hang.ranks == (1,) and hang.message == "rank 1 did not finish within 30 s (stage: all_reduce)"


def test_no_rank_started_is_a_launch_failure() -> None:
    (f,) = findings({}, 2, [], [], "gloo", None, 20.0, "torchrun: error: bad option\n", set())
    assert (
        f.id == "doctor.launch-failed"
        and f.message == "torchrun started no rank within 20 s (torchrun: error: bad option)"
    )


def test_clock_skew_across_hosts_and_low_bus_bandwidth() -> None:
    bw = [{"op": "all_reduce", "bytes": 2**26, "time_s": 1.0}]
    ranks = {
        0: _rank(0, clock=1000.0, env={"host": "a"}, bandwidth=bw),
        1: _rank(1, clock=1000.5, env={"host": "b"}, bandwidth=bw),
        2: _rank(2, clock=1010.0, env={"host": "c"}, bandwidth=[dict(bw[0], time_s=2.0)]),
    }
    found = _judge(ranks, min_busbw=10.0)
    skew = next(f for f in found if f.id == "doctor.clock-skew")
    assert skew.culprits == (2,) and skew.message == "the nodes' clocks differ by 10.0 s (rank 2 is furthest off)"
    low = next(f for f in found if f.id == "doctor.low-busbw")
    assert low.culprits == (2,) and low.message.startswith(
        "all_reduce bus bandwidth at 64 MiB is 0.0447 GB/s, below --min-busbw 10"
    )
