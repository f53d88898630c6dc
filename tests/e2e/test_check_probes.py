"""`ddpdoctor check`: each check probe, under real torchrun ranks, gives its finding with ranks and lines;
the healthy probe gives nothing above a note."""

from __future__ import annotations

from helpers import PROBES, ddpdoctor, finding, lines_of, marker_line, script_argv


def check(shared_job, name, *extra):
    """One run of the probe per session, shared with the other tests that ask for it (test_html.py)."""
    return shared_job.run(script_argv("check", str(PROBES / name), *extra))


def test_healthy_probe_passes_check_with_notes_at_most(tmp_path):
    r = ddpdoctor(["check", "--probe", "healthy"], tmp_path)
    assert r.code == 0, r.out + r.err[-2000:]
    assert r.report["verdict"] == "ok"
    # a teardown abort at exit (torch 2.13 + gloo, a few runs in 100) is the only warning allowed
    assert {f["severity"] for f in r.report["findings"] if not f["id"].startswith("teardown.")} <= {"note"}


def test_missing_set_epoch(shared_job):
    r = check(shared_job, "check_set_epoch.py")
    assert r.code == 1, r.out
    f = finding(r.report, "data.missing-set-epoch")
    probe = PROBES / "check_set_epoch.py"
    lines = {marker_line(probe, "SAMPLER"), marker_line(probe, "LOOP")}
    assert f["ranks"] == [0, 1] and f["culprits"] == [0, 1]
    assert lines_of(f, 0) == lines and lines_of(f, 1) == lines
    assert f["evidence"]["training_epochs"] == 3 and f["evidence"]["set_epoch_calls"] == 0


def test_dataloader_without_distributed_sampler(shared_job):
    r = check(shared_job, "check_no_sampler.py")
    f = finding(r.report, "data.shard-overlap")
    line = marker_line(PROBES / "check_no_sampler.py", "LOADER")
    assert lines_of(f, 0) == {line} and lines_of(f, 1) == {line}
    assert f["evidence"]["overlap"] == 1.0 and r.code == 1 and f["culprits"] == [0, 1]


def test_sampler_seed_differs_across_ranks(shared_job):
    r = check(shared_job, "check_sampler_seed.py")
    f = finding(r.report, "data.sampler-seed-mismatch")
    assert f["evidence"]["seeds"] == {"0": 1234, "1": 1235}
    assert f["culprits"] == [1]  # no majority of two: the rank that differs from rank 0
    assert lines_of(f, 1) == {marker_line(PROBES / "check_sampler_seed.py", "SEED")}  # where the seed is given
    ids = [x["id"] for x in r.report["findings"]]
    assert "data.shard-overlap" in ids  # what the mismatch does to the shards, measured


def test_batchnorm_buffers_drift_without_broadcast(shared_job):
    r = check(shared_job, "check_bn_drift.py")
    f = finding(r.report, "drift.buffers")
    assert f["evidence"]["forward_sync_buffers"] is False and f["evidence"]["batchnorm"] is True
    assert any("running_mean" in t for t in f["evidence"]["tensors"])
    assert lines_of(f, 0) == {marker_line(PROBES / "check_bn_drift.py", "WRAP")}
    assert "drift.parameters" not in [x["id"] for x in r.report["findings"]]


def test_parameter_changed_on_one_rank(shared_job):
    r = check(shared_job, "check_param_drift.py", "--fingerprint-every", "5")
    f = finding(r.report, "drift.parameters")
    assert f["evidence"]["tensors"] == ["0.weight"]
    assert 13 <= f["evidence"]["since_forward"] <= 20


def test_init_mismatch_with_init_sync_off(shared_job):
    r = check(shared_job, "check_init_sync.py")
    f = finding(r.report, "drift.init-mismatch")
    probe = PROBES / "check_init_sync.py"
    assert {marker_line(probe, "SEED"), marker_line(probe, "WRAP")} <= lines_of(f, 1)
    assert f["evidence"]["init_sync"] is False


def test_checkpoint_written_by_every_rank(shared_job):
    r = check(shared_job, "check_checkpoint_race.py")
    f = finding(r.report, "checkpoint.multiple-writers")
    line = marker_line(PROBES / "check_checkpoint_race.py", "SAVE")
    assert f["ranks"] == [0, 1] and lines_of(f, 0) == {line} and lines_of(f, 1) == {line}
    assert f["culprits"] == [0, 1]


def test_gradient_accumulation_without_no_sync(shared_job):
    r = check(shared_job, "check_grad_accum.py")
    f = finding(r.report, "perf.grad-accum-no-sync")
    assert f["evidence"]["micro_steps"] == 4
    assert f["evidence"]["wasted_bytes_per_step"] == 3 * (64 * 64 + 64 + 64 + 1) * 4
    assert lines_of(f, 0) == {marker_line(PROBES / "check_grad_accum.py", "STEP")}
    assert r.code == 0  # a performance warning does not fail the run by default


def test_steps_option_ends_a_long_run(tmp_path):
    r = ddpdoctor(["check", "--steps", "3", "--probe", "healthy", "--", "--epochs", "1000"], tmp_path, timeout=90)
    assert r.code == 0, r.err[-2000:]
    assert "--steps 3 reached" in r.err
