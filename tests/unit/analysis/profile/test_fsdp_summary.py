"""The profile summary's words on an FSDP job (analysis/profile/breakdown.py ``fsdp_words``) from hand-built
records: where a DDP job's buckets are, FSDP1's strategy, modules, flat parameters, mixed precision,
use_orig_params, CPU offload, sharded bytes and the time in its collectives; FSDP2's mesh and
reshard_after_forward (a record without ``kind`` is FSDP2's, as written before FSDP1 was known)."""

from __future__ import annotations

import timelines

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.profile.breakdown import detect
from ddpdoctor.record.reader import RankRecord, RunRecord

FSDP1 = {
    "kind": "FSDP1",
    "strategies": {"FULL_SHARD": 4},
    "modules": 4,
    "flat_params": 4,
    "params": 8,
    "sharded_bytes": 6 * 1024,
    "world": 2,
    "mp": {},
    "use_orig_params": False,
    "cpu_offload": False,
}
FSDP2 = {
    "modules": 4,
    "reshard_after_forward": 3,
    "mesh": {"shape": [2], "dims": ["dp"]},
    "mp": {"param_dtype": "bfloat16", "reduce_dtype": "float32"},
    "params": 8,
    "sharded_bytes": 3 * 2**20,
}


def _summary(fsdp: dict, **comm: float):
    tl = timelines.with_fsdp_comm(timelines.steps(10), **comm)
    tl.append(timelines.info(steps=10, forwards=10, buckets=[], fsdp=fsdp))
    rec = RunRecord("/run", {"command": "profile"}, {0: RankRecord(0, timeline=tl), 1: RankRecord(1, timeline=tl)}, [])
    (f,) = detect(rec, Config())
    assert f.id == "profile.summary"
    return f


def test_fsdp1_is_named_with_its_strategy_and_sharding_where_ddp_buckets_are() -> None:
    f = _summary(FSDP1, all_gather=2.0, reduce_scatter=3.0)
    assert "DDP buckets" not in f.message
    assert (
        ". FSDP1: FULL_SHARD, 4 FSDP module(s), 4 flat parameter(s) of 8 parameters (6.0 KiB sharded on rank 0, "
        "shard group of 2 rank(s)); mixed precision off; use_orig_params off; CPU offload off; in FSDP1's "
        "collectives per step (rank 0, inside forward and backward): all-gather 2.0 ms, reduce-scatter 3.0 ms; "
        "AMP off; forwards per step 1.0" in f.message
    ), f.message
    assert f.evidence["fsdp"] == FSDP1 and f.evidence["fsdp_rank"] == 0
    assert f.evidence["fsdp_comm_ms"] == {"all-gather": 2.0, "reduce-scatter": 3.0}


def test_fsdp1_mixed_strategies_hybrid_replicas_and_no_shard_all_reduce() -> None:
    fsdp = dict(
        FSDP1,
        strategies={"HYBRID_SHARD": 3, "NO_SHARD": 1},
        replicas=2,
        mp={"param_dtype": "bfloat16", "reduce_dtype": "float32", "buffer_dtype": "bfloat16"},
        use_orig_params=True,
        cpu_offload=True,
    )
    f = _summary(fsdp, all_gather=1.0, reduce_scatter=2.0, all_reduce=0.5)
    assert "FSDP1: HYBRID_SHARD on 3, NO_SHARD on 1, 4 FSDP module(s)" in f.message, f.message
    assert "shard group of 2 rank(s) x 2 replica(s)" in f.message
    assert "mixed precision param bfloat16, reduce float32, buffer bfloat16; use_orig_params on; CPU offload on" in (
        f.message
    )
    assert "all-gather 1.0 ms, reduce-scatter 2.0 ms, all-reduce 0.5 ms" in f.message


def test_fsdp1_without_collective_ranges_says_no_times() -> None:
    f = _summary(FSDP1)
    assert "FSDP1: FULL_SHARD" in f.message and "collectives per step" not in f.message
    assert f.evidence["fsdp_comm_ms"] == {}


def test_fsdp2_keeps_its_mesh_words_and_no_all_reduce_figure() -> None:
    f = _summary(FSDP2, all_gather=7.0, reduce_scatter=4.9)
    assert (
        "FSDP2: 4 sharded module(s) with parameters on a mesh of 2 (dp), 8 parameters (3.00 MiB sharded on rank 0); "
        "reshard_after_forward on 3 of 4; mixed precision param bfloat16, reduce float32; in FSDP2's collectives "
        "per step (rank 0, inside forward and backward): all-gather 7.0 ms, reduce-scatter 4.9 ms; AMP off; "
        "forwards per step 1.0" in f.message
    ), f.message
    assert "FSDP1" not in f.message and "all-reduce" not in f.message
