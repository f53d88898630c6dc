"""GPU memory growth told apart by layer (analysis/memleak/cuda.py): flat memory gives nothing; growing
allocated bytes are memleak.cuda on the growing rank; reserved growing over flat allocated is
fragmentation (memleak.cuda-reserved); NVML growing over a flat allocator is memleak.cuda-outside-allocator."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.analysis.memleak.cuda import detect
from ddpdoctor.record.reader import RankRecord, RunRecord

MIB = 2**20
STEPS = 100


def _steps(alloc: float = 0, reserved: float = 0, nvml: float = 0, **last) -> list[dict]:
    """One mem line a step: each series starts at 1 GiB and grows by the given bytes a step."""
    out = [
        {
            "kind": "mem",
            "step": s,
            "cuda_allocated": 2**30 + alloc * s,
            "cuda_reserved": 2**31 + reserved * s,
            "nvml_process": 2**32 + nvml * s,
        }
        for s in range(1, STEPS + 1)
    ]
    out[-1].update(last)
    return out


def _detect(tmp_path: Path, per_rank: dict[int, list[dict]], seen: set[str] | None = None, memory=None) -> list:
    ranks = {r: RankRecord(r, memory=(memory or {}).get(r, [])) for r in per_rank}
    rec = RunRecord(str(tmp_path), {"command": "memleak"}, ranks, [])
    return detect(rec, per_rank, {}, sorted(per_rank), seen or set())


def test_flat_gpu_memory_gives_nothing(tmp_path: Path) -> None:
    assert _detect(tmp_path, {0: _steps(), 1: _steps()}) == []


def test_no_cuda_figures_at_all_give_nothing(tmp_path: Path) -> None:
    cpu = {r: [{"kind": "mem", "step": s, "rss": 1000 * s} for s in range(1, STEPS)] for r in (0, 1)}
    assert _detect(tmp_path, cpu) == []


def test_allocated_growth_on_one_rank_is_a_leak_there(tmp_path: Path) -> None:
    summary = tmp_path / "ranks" / "1" / "cuda_memory_summary_census.txt"
    summary.parent.mkdir(parents=True)
    summary.write_text("|  Allocated memory  |\n")
    per = {0: _steps(), 1: _steps(alloc=MIB, reserved=MIB, nvml_total=80 * 2**30, nvml_used=40 * 2**30)}
    (f,) = _detect(tmp_path, per)
    assert f.id == "memleak.cuda" and f.severity == "error" and f.culprits == (1,)
    assert f.message.startswith(
        "CUDA allocated memory grows by 1.00 MiB per step on only rank(s) [1] of 2 (rank-conditional code; the "
        "others stay flat) (reserved +1.00 MiB per step): tensors kept on the GPU, a leak, not fragmentation"
    )
    assert "at this rate the GPU is full in about 41,000 more steps" in f.message
    assert f"rank 1's torch.cuda.memory_summary(): {summary}" in f.message
    assert f.evidence["per_step"] == MIB and f.evidence["memory_summary"] == str(summary)


def test_allocated_growth_already_explained_by_a_graph_leak_is_not_said_again(tmp_path: Path) -> None:
    per = {0: _steps(alloc=MIB), 1: _steps(alloc=MIB)}
    assert _detect(tmp_path, per, seen={"memleak.autograd-graph"}) == []


def test_reserved_growing_over_flat_allocated_is_fragmentation(tmp_path: Path) -> None:
    snap = {"kind": "cuda_snapshot", "which": "growth", "path": "/run/ranks/0/cuda_snapshot_growth.pickle"}
    (f,) = _detect(tmp_path, {0: _steps(reserved=2 * MIB), 1: _steps(reserved=2 * MIB)}, memory={0: [snap]})
    assert f.id == "memleak.cuda-reserved" and f.severity == "warning" and f.culprits == (0, 1)
    assert "reserved memory grows by 2.00 MiB per step on every rank while allocated memory stays flat" in f.message
    assert "(open at https://pytorch.org/memory_viz): /run/ranks/0/cuda_snapshot_growth.pickle" in f.message


def test_nvml_growing_over_a_flat_allocator_is_memory_outside_it(tmp_path: Path) -> None:
    (f,) = _detect(tmp_path, {0: _steps(nvml=512 * 1024), 1: _steps()})
    assert f.id == "memleak.cuda-outside-allocator" and f.culprits == (0,)
    assert f.message.startswith("this process's GPU memory (NVML) grows by 512.00 KiB per step on only rank(s) [0]")


def test_growth_below_the_threshold_is_noise(tmp_path: Path) -> None:
    assert _detect(tmp_path, {0: _steps(alloc=1024), 1: _steps(alloc=1024)}) == []
