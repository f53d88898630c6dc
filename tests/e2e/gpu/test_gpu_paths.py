"""The GPU paths, for real: NCCL's ledger and Work tracking, the CUDA allocator's figures and
memory_summary, NVML, NVTX under nsys. One rank (NCCL refuses two ranks on one GPU; multi-rank NCCL logic
is proven by tests/e2e/test_ncclsim.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import ddpdoctor, script_argv

SCRIPTS = Path(__file__).parent / "scripts"
ONE = ["--nproc-per-node", "1"]


def _lines(path: Path, kind: str) -> list[dict]:
    return [d for l in path.read_text().splitlines() if (d := json.loads(l)).get("kind") == kind]


def test_nccl_run_is_healthy_and_its_collectives_are_tracked_to_completion(tmp_path):
    r = ddpdoctor(script_argv("hang", str(SCRIPTS / "nccl_loop.py"), *ONE), tmp_path, timeout=240)
    assert r.code == 0, r.err[-3000:]
    assert [f for f in r.report["findings"] if f["severity"] == "error"] == []
    rank0 = r.run_dir / "ranks" / "0"
    init = _lines(rank0 / "events.jsonl", "init")
    assert init and init[0].get("backend") == "nccl"
    colls = [c for c in _lines(rank0 / "ledger.jsonl", "coll") if c.get("op") == "all_reduce"]
    assert len(colls) >= 80  # sync + async per step, each with its NCCL sequence number
    assert all(c["seq"][0] >= 1 for c in colls)
    hbs = _lines(rank0 / "heartbeat.jsonl", "hb")
    assert hbs and not hbs[-1].get("awaiting")  # every Work completed (is_completed on the CUDA event)


def test_cuda_leak_is_found_with_memory_summaries_and_nvml(tmp_path):
    r = ddpdoctor(script_argv("memleak", str(SCRIPTS / "cuda_leak.py"), *ONE), tmp_path, timeout=300)
    assert r.code == 1, r.err[-3000:]
    ids = {f["id"] for f in r.report["findings"]}
    assert ids & {"memleak.cuda", "memleak.autograd-graph", "memleak.tensors"}, ids
    rank0 = r.run_dir / "ranks" / "0"
    mem = _lines(rank0 / "memory.jsonl", "mem")
    assert mem and all("cuda_allocated" in m for m in mem)
    assert mem[-1]["cuda_allocated"] > mem[0]["cuda_allocated"]
    assert any("nvml_used" in m for m in mem), "NVML figures missing (pynvml)"
    for which in ("first", "census", "last"):
        assert (rank0 / f"cuda_memory_summary_{which}.txt").is_file(), which


def test_kept_gpu_tensors_are_a_cuda_leak_with_the_summary_and_a_snapshot(tmp_path):
    r = ddpdoctor(
        script_argv("memleak", str(SCRIPTS / "cuda_paths.py"), "--snapshot", *ONE, "--", "kept"), tmp_path, timeout=300
    )
    assert r.code == 1, r.err[-3000:]
    f = next(f for f in r.report["findings"] if f["id"] in ("memleak.cuda", "memleak.tensors"))
    assert f["culprits"] == [0]
    if f["id"] == "memleak.cuda":
        assert "a leak, not fragmentation" in f["message"] and "memory_summary" in f["message"]
    rank0 = r.run_dir / "ranks" / "0"
    snaps = sorted(p.name for p in rank0.glob("cuda_snapshot_*.pickle"))
    assert "cuda_snapshot_last.pickle" in snaps, snaps
    assert (rank0 / "cuda_snapshot_last.pickle").stat().st_size > 1000
    mem = _lines(rank0 / "memory.jsonl", "mem")
    assert any("nvml_process" in m for m in mem) or "NVML process" in r.out, "no per-process NVML figure, unsaid"


def test_changing_sizes_are_not_called_a_leak(tmp_path):
    r = ddpdoctor(script_argv("memleak", str(SCRIPTS / "cuda_paths.py"), *ONE, "--", "fragment"), tmp_path, timeout=300)
    assert "memleak.cuda" not in {f["id"] for f in r.report["findings"]}, r.out
    assert r.code in (0,), r.out  # at most the fragmentation warning


def test_a_steady_gpu_loop_is_clean(tmp_path):
    r = ddpdoctor(script_argv("memleak", str(SCRIPTS / "cuda_paths.py"), *ONE, "--", "healthy"), tmp_path, timeout=300)
    assert r.code == 0 and [f for f in r.report["findings"] if f["severity"] == "error"] == [], r.out


@pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys (Nsight Systems) is not installed")
def test_profile_under_nsys_writes_a_report(tmp_path):
    r = ddpdoctor(script_argv("profile", str(SCRIPTS / "nccl_loop.py"), "--nsys", *ONE), tmp_path, timeout=300)
    assert r.code in (0, 1), r.err[-3000:]
    reports = list((r.run_dir / "nsys").glob("*.nsys-rep"))
    assert reports, "no .nsys-rep written"
