"""memleak's verdicts on hand-built run records (pure, no ranks): which ranks are named as growing, when
"only on rank(s) ..." may be said, and when RSS growth may be called native memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builder import RunBuilder

from ddpdoctor.analysis import diagnose
from ddpdoctor.analysis.config import Config
from ddpdoctor.record.reader import load_run

STEPS = 200
CENSUS_AT = (1, 2, 4, 8, 16, 32, 64, 100, 128, 160, 199)


def _census(b: RunBuilder, r: int, s: int, nodes: int, tensors: int = 10, **extra: Any) -> None:
    b.census(
        r, 1.0 + s / 100, s, tensors=tensors, graph_nodes=nodes, tensor_bytes={"cpu": 4096 + 16 * tensors}, **extra
    )


def _run(root: Path, per_rank: dict[int, dict[str, Any]]) -> list:
    """Each rank: ``dense`` (nodes per step seen by the graph scan every 5 steps, or None for no scan),
    ``census`` (nodes per step seen by the censuses), ``census_at`` (their steps), ``rss`` (bytes per step)."""
    b = RunBuilder(root, command="memleak")
    for r, spec in per_rank.items():
        b.start(r)
        at = set(spec.get("census_at", CENSUS_AT))
        for s in range(1, STEPS + 1):
            fields: dict[str, Any] = {"rss": 300 * 2**20 + int(spec.get("rss", 0) * s)}
            if spec.get("dense") is not None and s % 5 == 1 and s <= spec.get("dense_until", STEPS):
                fields["local_graph"] = int(spec["dense"] * s)
            b.add(r, "memory.jsonl", "mem", 1.0 + s / 100, step=s, **fields)
            if s in at:
                _census(
                    b,
                    r,
                    s,
                    10 + int(spec.get("census", 0) * s),
                    tensors=10 + int(spec.get("tensors", 0) * s),
                    **spec.get("census_extra", {}),
                )
        b.finish(r, 5.0)
    return diagnose(load_run(str(root)), Config(), "memleak").findings


def _one(findings: list, fid: str) -> Any:
    got = [f for f in findings if f.id == fid]
    assert len(got) == 1, [(f.id, f.message) for f in findings]
    return got[0]


def test_a_rank_seen_growing_only_by_its_censuses_is_named_too(tmp_path: Path) -> None:
    """Rank 1's scan sees its graphs grow; rank 0's scan reaches no holder, but its censuses see the same
    growth: both ranks leak, and nothing is rank-conditional."""
    f = _one(_run(tmp_path, {0: {"dense": 0, "census": 5}, 1: {"dense": 5, "census": 5}}), "memleak.autograd-graph")
    assert f.culprits == (0, 1) and "every rank" in f.message and "rank-conditional" not in f.message


def test_only_is_said_when_the_other_ranks_are_seen_flat(tmp_path: Path) -> None:
    f = _one(_run(tmp_path, {0: {"dense": 0, "census": 0}, 1: {"dense": 5, "census": 5}}), "memleak.autograd-graph")
    assert f.culprits == (1,)
    assert "on only rank(s) [1] of 2 (rank-conditional code; the others stay flat)" in f.message


def test_a_flat_rank_whose_samples_thin_out_is_still_seen_flat(tmp_path: Path) -> None:
    """Rank 0 stays level: its graph scans stop at step 80 (their budget shrinks while nothing grows) and its
    censuses after the doublings are only the one at the end; level from step 1 to the end is flat."""
    flat = {"dense": 0, "dense_until": 80, "census": 0, "census_at": (1, 2, 4, 8, 16, 32, 199)}
    f = _one(_run(tmp_path, {0: flat, 1: {"dense": 5, "census": 5}}), "memleak.autograd-graph")
    assert f.culprits == (1,) and f.evidence["ranks_unknown"] == []
    assert "on only rank(s) [1] of 2 (rank-conditional code; the others stay flat)" in f.message


def test_a_rank_whose_sparse_samples_rise_is_not_called_flat(tmp_path: Path) -> None:
    """The same thinned-out series, rising half as fast as rank 1: not flat (and not proven to grow)."""
    rising = {"dense": 2.5, "dense_until": 80, "census": 2.5, "census_at": (1, 2, 4, 8, 16, 32, 199)}
    f = _one(_run(tmp_path, {0: rising, 1: {"dense": 5, "census": 5}}), "memleak.autograd-graph")
    assert "rank-conditional" not in f.message


def test_a_rank_with_too_few_samples_is_not_called_flat(tmp_path: Path) -> None:
    f = _one(
        _run(tmp_path, {0: {"dense": None, "census": 0, "census_at": (1, 2)}, 1: {"dense": 5, "census": 5}}),
        "memleak.autograd-graph",
    )
    assert f.culprits == (1,)
    assert "on only" not in f.message and "rank-conditional" not in f.message
    assert "rank(s) [0]: too few samples" in f.message and f.evidence["ranks_unknown"] == [0]


def test_rss_growth_is_not_native_while_the_censuses_see_graphs_grow(tmp_path: Path) -> None:
    """RSS grows 256 KiB a step; the censuses covering it see the graph nodes rise slowly (saved activations
    are not Python objects, so tensor bytes stay small): the cause the census sees is named, not native."""
    spec = {"dense": None, "census": 0.1, "rss": 256 * 1024, "census_at": CENSUS_AT}
    findings = _run(tmp_path, {0: spec, 1: spec})
    f = _one(findings, "memleak.rss")
    assert "native" not in f.message.replace("Not native", "") and f.evidence["cause"] == "graphs"
    assert "autograd graph nodes on rank(s) [0, 1]" in f.message or "autograd graph nodes on rank(s) [0,1]" in f.message


def test_rss_growth_with_flat_censuses_is_native(tmp_path: Path) -> None:
    spec = {"dense": None, "census": 0, "rss": 256 * 1024}
    f = _one(_run(tmp_path, {0: spec, 1: spec}), "memleak.rss")
    assert "native memory" in f.message and f.evidence["cause"] == "native" and f.culprits == (0, 1)


def test_a_holder_search_the_ranks_could_not_afford_is_said_not_left_out(tmp_path: Path) -> None:
    """Issue 37: the graph grows on both ranks, no census names a holder, and the censuses say their floor was
    skipped at the probes' CPU cap: the finding stays the graph's and says why the holder is missing."""
    spec = {"dense": 5, "census": 5, "census_extra": {"floor_skipped": 3}}
    f = _one(_run(tmp_path, {0: spec, 1: spec}), "memleak.autograd-graph")
    assert "holder search skipped on rank(s) [0,1]: ranks' CPU was saturated" in f.message, f.message
    assert set(f.evidence["holder_search_skipped"]) == {"0", "1"}
    quiet = _one(_run(tmp_path / "quiet", {0: {"dense": 5, "census": 5}, 1: {"dense": 5, "census": 5}}), f.id)
    assert "skipped" not in quiet.message and "holder_search_skipped" not in quiet.evidence


def test_a_search_cut_at_its_cpu_cap_is_said(tmp_path: Path) -> None:
    grown = [{"group": "[4]|float32|cpu|True", "added": 3, "sampled": 3, "search": "capped"}]
    spec = {"dense": 5, "census": 5, "census_extra": {"grown": grown}}
    f = _one(_run(tmp_path, {0: spec, 1: {"dense": 5, "census": 5}}), "memleak.autograd-graph")
    assert "holder search skipped on rank(s) [0]: ranks' CPU was saturated (the search reached its CPU-time cap" in (
        f.message
    )


def test_rss_growth_with_too_few_censuses_says_the_floor_was_skipped(tmp_path: Path) -> None:
    spec = {"dense": None, "census": 0, "rss": 256 * 1024, "census_at": (1, 2), "census_extra": {"floor_skipped": 4}}
    f = _one(_run(tmp_path, {0: spec, 1: spec}), "memleak.rss")
    assert "too few censuses" in f.message and "census skipped on rank(s) [0,1]: ranks' CPU was saturated" in (
        f.message
    )
    assert f.evidence["cause"] == "unknown" and set(f.evidence["census_skipped"]) == {"0", "1"}


# -- the GPU path, from hand-built per-step CUDA figures (the rank side runs where a GPU is) ---------------


def _cuda_run(root: Path, allocated: float, reserved: float, process: float, ranks=(0, 1)) -> list:
    """Per step: the allocator's allocated / reserved bytes and NVML's process bytes grow by these slopes."""
    b = RunBuilder(root, command="memleak")
    for r in ranks:
        b.start(r)
        for s in range(1, STEPS + 1):
            a = 2**30 + int(allocated * s)
            res = 2**31 + int(reserved * s)
            b.add(
                r,
                "memory.jsonl",
                "mem",
                1.0 + s / 100,
                step=s,
                rss=300 * 2**20,
                cuda_allocated=a,
                cuda_reserved=res,
                cuda_active=a,
                nvml_used=res + 2**29 + int(process * s),
                nvml_total=80 * 2**30,
                nvml_process=res + 2**29 + int(process * s),
            )
            if s in CENSUS_AT:
                _census(b, r, s, 10)
        b.finish(r, 5.0)
    return diagnose(load_run(str(root)), Config(), "memleak").findings


def test_allocated_growth_is_a_cuda_leak_not_fragmentation(tmp_path: Path) -> None:
    f = _one(_cuda_run(tmp_path, allocated=2**20, reserved=2**20, process=0), "memleak.cuda")
    assert f.culprits == (0, 1) and "a leak, not fragmentation" in f.message and "every rank" in f.message
    assert "GPU is full in about" in f.message
    assert not [x for x in _cuda_run(tmp_path / "b", 2**20, 2**20, 0) if x.id == "memleak.cuda-reserved"]


def test_reserved_growth_with_flat_allocated_is_fragmentation(tmp_path: Path) -> None:
    findings = _cuda_run(tmp_path, allocated=0, reserved=2**20, process=0)
    f = _one(findings, "memleak.cuda-reserved")
    assert f.severity == "warning" and "not a leak" in f.message and "expandable_segments" in f.hint
    assert "memleak.cuda" not in [x.id for x in findings]


def test_process_memory_outside_the_allocator(tmp_path: Path) -> None:
    findings = _cuda_run(tmp_path, allocated=0, reserved=0, process=2**20, ranks=(0, 1))
    f = _one(findings, "memleak.cuda-outside-allocator")
    assert f.culprits == (0, 1) and "NCCL" in f.message
    assert {x.id for x in findings} == {"memleak.cuda-outside-allocator"}


def test_flat_gpu_memory_gives_no_cuda_finding(tmp_path: Path) -> None:
    assert [x.id for x in _cuda_run(tmp_path, 0, 0, 0) if x.id.startswith("memleak.")] == []
