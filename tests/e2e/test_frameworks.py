"""Scripts written with PyTorch Lightning and Hugging Face Accelerate, run for real (torchrun, 2 ranks, gloo).

Healthy ones get no error-severity finding; planted faults get the right id, culprit ranks and the user's
line (never a line inside the framework). The framework tests are skipped where the library is not
installed (``pip install -e '.[frameworks]'``); run them with that environment's python.
"""

from __future__ import annotations

import pytest
from helpers import PROBES, ROOT, ddpdoctor, finding, lines_of, marker_line, needs, script_argv

FW = ROOT / "tests" / "frameworks"
needs_lightning = needs("lightning")
needs_accelerate = needs("accelerate")


def _run(tmp_path, command, script, *extra, timeout=90):
    return ddpdoctor(script_argv(command, str(script), *extra), tmp_path, timeout=timeout)


def _errors(r):
    return [(f["id"], f["message"]) for f in r.report["findings"] if f["severity"] == "error"]


def _check_fault(r, fid, script, culprits, markers=("FAULT",)):
    assert r.code == 1, r.out + r.err[-3000:]
    f = finding(r.report, fid)
    assert tuple(f["culprits"]) == culprits, f
    for m in markers:
        line = marker_line(script, m)
        for rank in culprits:
            assert line in lines_of(f, rank), (m, line, f["locations"])
    assert all(l["file"] == str(script) for l in f["locations"]), f["locations"]
    return f


# -- healthy scripts --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["hang", "check"])
@pytest.mark.parametrize(
    "name",
    [
        pytest.param("lightning_healthy", marks=needs_lightning),
        pytest.param("accelerate_healthy", marks=needs_accelerate),
    ],
)
def test_healthy_framework_script_has_no_error(tmp_path, name, command):
    r = _run(tmp_path, command, FW / f"{name}.py")
    assert r.code == 0, r.out + r.err[-3000:]
    assert not _errors(r), _errors(r)
    assert len(r.report["ranks"]) == 2 and all(x["state"] == "finished" for x in r.report["ranks"]), r.report["ranks"]


@needs_accelerate
def test_accelerate_healthy_under_memleak(tmp_path):
    r = _run(tmp_path, "memleak", FW / "accelerate_healthy.py")
    assert r.code == 0 and not _errors(r), (_errors(r), r.err[-2000:])


@needs_lightning
def test_lightning_healthy_under_profile(tmp_path):
    r = _run(tmp_path, "profile", FW / "lightning_healthy.py")
    assert r.code == 0 and not _errors(r), (_errors(r), r.err[-2000:])


@needs_lightning
def test_lightning_own_sampler_is_healthy_and_devices_sets_the_rank_count(tmp_path):
    """Lightning calls set_epoch on the module's own DistributedSampler; Trainer(devices=3) makes 3 ranks
    without --nproc-per-node (with 2, Lightning would refuse torchrun's world size)."""
    src = (FW / "lightning_own_sampler.py").read_text().replace("devices=2", "devices=3")
    script = tmp_path / "lightning_own_sampler3.py"
    script.write_text(src)
    r = _run(tmp_path, "check", script, timeout=120)
    assert "--nproc-per-node 3" in r.err, r.err[-2000:]
    assert r.code == 0 and not _errors(r), (_errors(r), r.err[-3000:])
    assert [x["rank"] for x in r.report["ranks"]] == [0, 1, 2], r.report["ranks"]
    assert "data.missing-set-epoch" not in [f["id"] for f in r.report["findings"]]


# -- planted faults ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("lightning_rank0_gather", marks=needs_lightning),
        pytest.param("accelerate_rank0_gather", marks=needs_accelerate),
    ],
)
def test_rank0_only_collective_in_framework_code_is_located_at_the_users_line(tmp_path, name):
    script = FW / f"{name}.py"
    r = _run(tmp_path, "hang", script)
    assert r.code == 3, r.out + r.err[-3000:]
    f = finding(r.report, "hang.rank-conditional-collective")
    assert f["culprits"] == [0], f
    assert marker_line(script, "FAULT") in lines_of(f, 0), f["locations"]


@needs_accelerate
def test_accelerate_custom_loop_without_set_epoch(tmp_path):
    script = FW / "accelerate_no_set_epoch.py"
    f = _check_fault(
        _run(tmp_path, "check", script), "data.missing-set-epoch", script, (0, 1), markers=("FAULT", "FAULT-LOOP")
    )
    assert "accelerator.prepare" in f["hint"], f["hint"]


@needs_accelerate
def test_accelerate_over_a_distributed_sampler_shards_twice(tmp_path):
    """Judged from what the ranks fetched: Accelerate's BatchSamplerShard over the user's DistributedSampler
    leaves half of the data set out of every epoch."""
    script = FW / "accelerate_double_shard.py"
    f = _check_fault(_run(tmp_path, "check", script), "data.shard-gaps", script, (0, 1))
    assert f["evidence"]["gaps"] == 128 and f["evidence"]["dataset_len"] == 256, f["evidence"]
    assert "Accelerate" in f["message"] and "BatchSamplerShard" in f["message"], f["message"]


@needs_lightning
def test_lightning_without_distributed_sampler_overlaps(tmp_path):
    script = FW / "lightning_no_dist_sampler.py"
    f = _check_fault(_run(tmp_path, "check", script), "data.shard-overlap", script, (0, 1))
    assert f["evidence"]["overlap"] == 1.0 and "use_distributed_sampler" in f["hint"], f


def test_plain_script_without_sampler_still_overlaps(shared_job):
    # the control for the frameworks' overlap cases above: the same job as test_check_probes.py's, run once
    script = PROBES / "check_no_sampler.py"
    r = shared_job.run(script_argv("check", str(script)))
    assert r.code == 1, r.out + r.err[-3000:]
    f = finding(r.report, "data.shard-overlap")
    assert tuple(f["culprits"]) == (0, 1)
    line = marker_line(script, "LOADER")
    assert lines_of(f, 0) == {line} and lines_of(f, 1) == {line}


# -- Lightning's own launcher: devices=N read from the script -----------------------------------------------------


# -- leaks and stragglers through the frameworks ----------------------------------------------------------------


@needs_lightning
def test_lightning_healthy_under_memleak(tmp_path):
    r = _run(tmp_path, "memleak", FW / "lightning_healthy.py")
    assert r.code == 0 and not _errors(r), (_errors(r), r.err[-2000:])


@needs_lightning
def test_lightning_module_keeping_losses_with_graphs_is_a_leak_at_the_users_line(tmp_path):
    script = FW / "lightning_leak_history.py"
    # --steps spreads the censuses evenly over the run (8 of them), whatever the machine's load
    r = _run(tmp_path, "memleak", script, "--steps", "64", timeout=120)
    _check_fault(r, "memleak.autograd-graph", script, (0, 1))


@needs_accelerate
def test_accelerate_straggler_is_named_with_its_line(tmp_path):
    script = FW / "accelerate_straggler.py"
    r = _run(tmp_path, "profile", script, timeout=120)
    assert r.code == 0, r.out + r.err[-3000:]  # a straggler is a warning
    f = finding(r.report, "profile.straggler")
    assert f["culprits"] == [1], f
    assert marker_line(script, "FAULT") in lines_of(f, 1), f["locations"]


@needs_lightning
def test_lightning_callback_keeping_logits_on_rank_0_is_named_from_the_growth(tmp_path):
    """Only the Trainer's list of callbacks refers to the callback that keeps the logits: the holder is
    found from what grows (its referrers), named as the callback writes it, on rank 0 alone."""
    script = FW / "lightning_callback_keeps_logits.py"
    r = _run(tmp_path, "memleak", script, timeout=120)
    f = _check_fault(r, "memleak.autograd-graph", script, (0,))
    assert "`self._epoch_logits` (EpochLogits.on_train_batch_end" in f["message"]
    assert "on only rank(s) [0] of 2" in f["message"]
