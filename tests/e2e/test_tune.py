"""``ddpdoctor tune`` and ``ddpdoctor profile --scaling`` on real gloo jobs (tests/scripts/tune_*.py).

Each tune run is a survey run and repetitions of the A/A pair and the knob arms: several torchrun jobs, so
the jobs are the `extended` tier; the bad-input cases start no job and stay in the default tier.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import ROOT, ddpdoctor

SCRIPTS = ROOT / "tests" / "scripts"


@pytest.mark.extended
def test_more_workers_help_a_data_bound_job_beyond_the_aa_spread(tmp_path):
    r = ddpdoctor(
        ["tune", "--knobs", "num_workers", "--reps", "2", "--steps", "30", str(SCRIPTS / "tune_data_bound.py")],
        tmp_path,
        timeout=900,
    )
    assert r.code == 0, r.err[-3000:]
    arms = r.report["arms"]
    spread = r.report["aa_spread"]
    for lab in ("num_workers=2", "num_workers=4"):
        assert arms[lab]["verdict"] == "faster"
        assert len(arms[lab]["gains"]) == 2 and min(arms[lab]["gains"]) > spread  # every rep, beyond A/A
    assert r.report["best"] in ("num_workers=2", "num_workers=4")
    best = r.report["best"]
    assert f"verdict: {best} is faster in every repetition, beyond the A/A spread" in r.out
    assert f"change: DataLoader(..., num_workers={best.split('=')[1]})" in r.out
    assert re.search(r"baseline A'\s+\d+\.\d ms \[", r.out) and "A/A spread:" in r.out
    # the DDP knobs were not asked for; every arm ran in its own run directory, rotated
    orders = [line for line in r.err.splitlines() if re.search(r": repetition \d+/2: ", line)]
    assert orders[0].endswith("baseline A, baseline A', num_workers=2, num_workers=4")
    assert orders[1].endswith("baseline A', num_workers=2, num_workers=4, baseline A")


@pytest.mark.extended
def test_a_healthy_compute_bound_job_gets_no_invented_gain(tmp_path):
    r = ddpdoctor(
        [
            "tune",
            "--knobs",
            "gradient_as_bucket_view,num_workers",
            "--reps",
            "3",
            "--steps",
            "30",
            str(SCRIPTS / "tune_compute_bound.py"),
        ],  # fmt: skip
        tmp_path,
        timeout=900,
    )
    assert r.code == 0, r.err[-3000:]
    assert r.report["best"] is None
    assert r.report["arms"]["gradient_as_bucket_view"]["verdict"] in ("within noise", "slower")
    assert "verdict: no change beyond noise" in r.out and "change:" not in r.out
    assert "not tried: num_workers: the script makes no DataLoader" in r.out


@pytest.mark.extended
def test_the_bucket_sweep_runs_each_size_in_place_of_the_scripts_own(tmp_path):
    """The script sets bucket_cap_mb=1; each sweep arm's DDP was built with the arm's size (DDP's own logger
    says so), the script's value is left out of the sweep, and whatever the verdicts, each is one of the
    rule's (bucket size does not matter beyond noise on gloo here: docs/how-it-works.md)."""
    r = ddpdoctor(
        ["tune", "--knobs", "bucket_cap_mb", "--reps", "2", "--steps", "20", str(SCRIPTS / "tune_small_buckets.py")],
        tmp_path,
        timeout=900,
    )
    assert r.code == 0, r.err[-3000:]
    arms = r.report["arms"]
    assert [a for a in arms if a.startswith("bucket")] == ["bucket_cap_mb=5", "bucket_cap_mb=25", "bucket_cap_mb=100"]
    assert all(arms[a]["verdict"] in ("faster", "slower", "within noise") for a in arms if a.startswith("bucket"))

    def cap_of(folder: Path) -> float:
        infos = [
            e
            for e in map(json.loads, (folder / "ranks" / "0" / "timeline.jsonl").read_text().splitlines())
            if e["kind"] == "profile_info"
        ]
        return infos[-1]["bucket_cap_mb"]

    assert cap_of(r.run_dir / "survey") == 1
    for cap in (5, 25, 100):
        [folder] = [d for d in r.run_dir.iterdir() if d.name.startswith("rep0-") and d.name.endswith(f"={cap}")]
        assert cap_of(folder) == cap


@pytest.mark.extended
def test_scaling_on_one_and_two_ranks(tmp_path):
    r = ddpdoctor(
        ["profile", "--scaling", "1,2", "--steps", "30", str(SCRIPTS / "tune_compute_bound.py")], tmp_path, timeout=600
    )
    assert r.code == 0, r.err[-3000:]
    m = re.search(r"^  2 ranks: (\d+\.\d\d)x of 2x \((\d+) %\)", r.out, re.M)
    assert m and float(m.group(1)) > 0 and abs(float(m.group(1)) / 2 * 100 - int(m.group(2))) <= 1
    # on a busy shared host the 1-rank run can be the slow one: the report must then say it is above linear
    assert ("note: above linear" in r.out) == (float(m.group(1)) / 2 > 1.05)
    assert "OMP_NUM_THREADS=1 in every run" in r.out
    assert "128 per rank per step at 1 rank" in r.out  # the forward's batch of 128 samples, counted
    assert re.search(r"lost \d+\.\d ms of its \d+\.\d ms step: exposed communication", r.out)
    html = (r.run_dir / "ranks-2" / "report.html").read_text()
    assert "Scaling (profile --scaling)" in html and "linear" in html
    manifest = json.loads((r.run_dir / "ranks-2" / "manifest.json").read_text())
    assert [p["world_size"] for p in manifest["scaling"]] == [1, 2]
    assert r.report is not None and r.report["command"] == "profile"


@pytest.mark.parametrize(
    "args,words",
    [
        (["profile", "--scaling", "2"], "--scaling takes two or more world sizes"),
        (["profile", "--scaling", "1,2", "--nproc-per-node", "2"], "--scaling sets the number of ranks"),
        (["tune", "--junit", "x.xml"], "tune: --junit is not written"),
        (["tune", "--knobs", "warp_speed"], "the knobs are bucket_cap_mb"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, words):
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('never run')\n")
    r = ddpdoctor([*args, str(script)], tmp_path, json_report=False)
    assert r.code == 2 and words in r.err and "Traceback" not in r.err
    assert not Path(r.run_dir).exists() or not any(Path(r.run_dir).iterdir())


def test_a_script_that_fails_unchanged_stops_tune_after_the_survey(tmp_path):
    """One short job (default tier): the survey run crashes, so every arm would; tune prints that run's
    report with its finding and exit code, and runs no arm."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch.distributed as dist\ndist.init_process_group('gloo')\nraise ValueError('bad config')  # CRASH\n"
    )
    r = ddpdoctor(["tune", str(script)], tmp_path, json_report=False)
    assert r.code == 1, r.err[-3000:]
    assert "the survey run (the script unchanged) failed" in r.err
    assert "crash.exception" in r.out and "bad config" in r.out
    assert [d.name for d in r.run_dir.iterdir()] == ["survey"]
