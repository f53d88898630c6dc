"""`ddpdoctor memleak` with real torchrun ranks: each leak probe is found with its ranks, holder and line;
the plateau and healthy probes give none. CUDA paths run where a GPU exists and skip cleanly here."""

from __future__ import annotations

from xml.etree import ElementTree as ET

import pytest
from helpers import PROBES, ddpdoctor, finding, marker_line

CENSUS = ("--census-every", "10")


def memleak(tmp_path, name, *extra):
    return ddpdoctor(["memleak", "--script", str(PROBES / name), *CENSUS, *extra], tmp_path)


def test_loss_accumulated_with_its_graph_on_every_rank(tmp_path):
    r = memleak(tmp_path, "leak_graph.py")
    assert r.code == 1, r.out + r.err[-2000:]
    f = finding(r.report, "memleak.autograd-graph")
    assert f["ranks"] == [0, 1]
    line = marker_line(PROBES / "leak_graph.py", "ACCUM")
    assert {(l["rank"], l["line"]) for l in f["locations"]} == {(0, line), (1, line)}
    assert "total_loss" in f["message"] and "every rank" in f["message"]
    assert f["evidence"]["nodes_per_step"] >= 3
    svg = r.run_dir / "memory.svg"
    assert svg.is_file() and str(svg) in r.out
    root = ET.fromstring(svg.read_text())
    assert root.tag.endswith("svg") and len(root.findall(".//{http://www.w3.org/2000/svg}polyline")) >= 4
    assert "no CUDA figures" in r.out


def test_outputs_kept_on_rank_0_only(tmp_path):
    r = memleak(tmp_path, "leak_rank0_outputs.py")
    f = finding(r.report, "memleak.autograd-graph")
    assert f["ranks"] == [0]
    assert "only on rank(s) [0]" in f["message"]
    assert [(l["rank"], l["line"]) for l in f["locations"]] == [(0, marker_line(PROBES / "leak_rank0_outputs.py", "STORE"))]
    assert "outputs" in f["message"]


@pytest.mark.parametrize("probe", ["plateau.py", "healthy.py"])
def test_no_leak_on_plateau_and_healthy(tmp_path, probe):
    extra = ("--", "--epochs", "8") if probe == "healthy.py" else ()
    r = memleak(tmp_path, probe, *extra)
    assert r.code == 0, r.out
    assert [f["id"] for f in r.report["findings"] if f["id"].startswith("memleak.")] == []


def test_steps_option_ends_the_run(tmp_path):
    r = ddpdoctor(["memleak", "--script", str(PROBES / "leak_graph.py"), "--steps", "30", *CENSUS, "--",
                   "--steps", "100000"], tmp_path, timeout=120)
    assert "--steps 30 reached" in r.err


def test_cuda_memory_figures_on_a_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU: the CUDA allocator and NVML paths run only where one exists")
    r = memleak(tmp_path, "healthy.py", "--nproc-per-node", "1", "--", "--epochs", "4")
    steps = [l for l in (r.run_dir / "ranks" / "0" / "memory.jsonl").read_text().splitlines() if '"mem"' in l]
    assert steps and all("cuda_allocated" in l for l in steps)
    assert (r.run_dir / "ranks" / "0" / "cuda_memory_summary_first.txt").is_file()
