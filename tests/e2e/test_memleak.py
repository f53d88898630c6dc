"""`ddpdoctor memleak` with real torchrun ranks and default settings: each leak probe is found with its
culprit ranks, holder (as the code writes it) and storing line, in slow and fast loops; healthy loops of
several styles, the plateau and the healthy probe give no error. CUDA paths run where a GPU exists and skip
cleanly here."""

from __future__ import annotations

import json
import textwrap
from xml.etree import ElementTree as ET

import pytest
from helpers import PROBES, ddpdoctor, finding, marker_line, script_argv

HEALTHY_STYLES = textwrap.dedent("""
    import argparse
    import collections

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP


    def main():
        ap = argparse.ArgumentParser()
        ap.add_argument("--steps", type=int, default=500)
        args = ap.parse_args()
        dist.init_process_group("gloo")
        torch.manual_seed(0)
        model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        losses = []                                  # loss.item() per step
        history = []                                 # a small dict of floats per step
        metrics = collections.defaultdict(float)     # running sums
        recent = collections.deque(maxlen=50)        # detached losses, bounded
        for step in range(args.steps):
            loss = model(torch.randn(16, 32)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            metrics["loss"] += losses[-1]
            metrics["steps"] += 1
            history.append({"step": step, "loss": losses[-1]})
            recent.append(loss.detach())
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
""")


def memleak(tmp_path, name, *extra):
    return ddpdoctor(script_argv("memleak", str(PROBES / name), *extra), tmp_path)


def errors(report):
    return [(f["id"], f["message"]) for f in report["findings"] if f["severity"] == "error"]


def test_loss_accumulated_with_its_graph_on_every_rank(shared_job):
    """60 steps show the graph's growth (the probe's default is 120); test_html.py reads the same job."""
    r = shared_job.run(["memleak", str(PROBES / "leak_graph.py"), "--steps", "60"])
    assert r.code == 1, r.out + r.err[-2000:]
    f = finding(r.report, "memleak.autograd-graph")
    assert f["ranks"] == [0, 1] and f["culprits"] == [0, 1]
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
    assert f["ranks"] == [0] and f["culprits"] == [0]
    assert "only rank(s) [0]" in f["message"]
    assert [(l["rank"], l["line"]) for l in f["locations"]] == [
        (0, marker_line(PROBES / "leak_rank0_outputs.py", "STORE"))
    ]
    assert "`outputs`" in f["message"]


def test_tutorial_trainer_keeps_losses_in_an_attribute(tmp_path):
    """The tutorial's Trainer with `self.losses.append(loss)`: a fast loop of 128 steps, default settings."""
    r = memleak(tmp_path, "leak_trainer_losses.py", "--", "4")
    assert r.code == 1, r.out + r.err[-2000:]
    f = finding(r.report, "memleak.autograd-graph")
    assert f["culprits"] == [0, 1]
    line = marker_line(PROBES / "leak_trainer_losses.py", "KEEP")
    assert {(l["rank"], l["line"], l["function"], l["role"]) for l in f["locations"]} == {
        (0, line, "_run_batch", "stores"),
        (1, line, "_run_batch", "stores"),
    }
    assert "`self.losses`" in f["message"] and "every rank" in f["message"]
    assert f["evidence"]["holders"]["0"]["name"] == "self.losses"


def test_rank0_tracker_attribute_in_a_fast_loop(tmp_path):
    """Kept from a method of a class that is not on the stack at the step, on rank 0 only, no sleep."""
    r = memleak(tmp_path, "leak_rank0_attr.py")
    assert r.code == 1, r.out + r.err[-2000:]
    f = finding(r.report, "memleak.autograd-graph")
    assert f["culprits"] == [0] and "only rank(s) [0]" in f["message"]
    assert [(l["rank"], l["line"], l["function"]) for l in f["locations"]] == [
        (0, marker_line(PROBES / "leak_rank0_attr.py", "STORE"), "record")
    ]
    assert "`self.history`" in f["message"]
    assert "memleak.rss" not in [x["id"] for x in r.report["findings"]]
    # enough censuses on the leaking rank, spread over the run, though each costs many steps' time
    cs = [
        json.loads(l) for l in (r.run_dir / "ranks" / "0" / "memory.jsonl").read_text().splitlines() if '"census"' in l
    ]
    steps = sorted(c["step"] for c in cs if not c.get("final"))
    assert len(steps) >= 8 and steps[0] == 1 and steps[-1] >= 200, steps


@pytest.mark.parametrize("style", ["tutorial", "tutorial-item", "plain-loop"])
def test_healthy_fast_loops_have_no_error(tmp_path, style):
    if style == "plain-loop":
        script = tmp_path / "train_styles.py"
        script.write_text(HEALTHY_STYLES)
        r = ddpdoctor(["memleak", str(script)], tmp_path)
    else:
        r = memleak(tmp_path, "leak_trainer_losses.py", "--", "4", "--keep", "none" if style == "tutorial" else "item")
    assert errors(r.report) == [] and r.code == 0, r.out


def _healthy_8_epochs(shared_job):
    """The healthy probe for 8 epochs with --snapshot: on a CPU run --snapshot takes nothing, so the one job
    serves both the no-leak verdict and the snapshot's note."""
    return shared_job.run(["memleak", "--snapshot", str(PROBES / "healthy.py"), "--epochs", "8"])


@pytest.mark.parametrize("probe", ["plateau.py", "healthy.py"])
def test_no_leak_on_plateau_and_healthy(tmp_path, shared_job, probe):
    r = _healthy_8_epochs(shared_job) if probe == "healthy.py" else memleak(tmp_path, probe)
    assert r.code == 0, r.out
    assert [f["id"] for f in r.report["findings"] if f["id"].startswith("memleak.")] == []


def test_steps_option_ends_the_run(tmp_path):
    r = ddpdoctor(
        [
            "memleak",
            "--steps",
            "30",
            "--census-every",
            "10",
            str(PROBES / "leak_graph.py"),
            "--steps",
            "100000",
        ],
        tmp_path,
        timeout=120,
    )
    assert "--steps 30 reached" in r.err
    cs = [
        json.loads(l) for l in (r.run_dir / "ranks" / "0" / "memory.jsonl").read_text().splitlines() if '"census"' in l
    ]
    assert [c["step"] for c in cs][:3] == [1, 10, 20]


def test_cuda_memory_figures_on_a_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU: the CUDA allocator and NVML paths run only where one exists")
    r = memleak(tmp_path, "healthy.py", "--nproc-per-node", "1", "--", "--epochs", "4")
    steps = [l for l in (r.run_dir / "ranks" / "0" / "memory.jsonl").read_text().splitlines() if '"mem"' in l]
    assert steps and all("cuda_allocated" in l for l in steps)
    assert (r.run_dir / "ranks" / "0" / "cuda_memory_summary_first.txt").is_file()


def test_snapshot_on_a_cpu_run_says_it_took_nothing(shared_job):
    r = _healthy_8_epochs(shared_job)
    assert r.code == 0, r.out
    assert "--snapshot took nothing on rank(s) [0, 1]" in r.out and "no CUDA figures" in r.out
    assert not list(r.run_dir.glob("ranks/*/cuda_snapshot_*"))
