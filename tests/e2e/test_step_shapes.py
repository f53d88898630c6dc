"""One notion of a step for every shape of loop (issue 51, rank/steps.py): a DDP job written as a plain
loop, with gradient accumulation, with two optimizers, with a GradScaler that skips every fourth step, and
with a hand-written update, 2 gloo ranks, 12 steps each. The ranks table counts 12 steps in every shape
(and DDP's forwards where those differ), each rank's finish event says how its steps ended, and ``--steps``
stops an accumulating job at its optimizer steps, not its forwards.

Six small jobs: the extended tier."""

from __future__ import annotations

import json

import pytest
from helpers import ROOT, ddpdoctor, script_argv

SCRIPT = ROOT / "tests" / "scripts" / "step_shapes.py"

pytestmark = pytest.mark.extended

SHAPES = {
    "plain": ("12 steps", {"optimizer": 12}),
    "accum": ("12 steps, 48 DDP forwards", {"optimizer": 12}),
    "two_opts": ("12 steps", {"optimizer": 12}),
    "scaler": ("12 steps", {"optimizer": 9, "skipped": 3}),
    "hand": ("12 steps", {"backward": 12}),
}


def _finish(run_dir, rank: int) -> dict:
    lines = (run_dir / "ranks" / str(rank) / "events.jsonl").read_text().splitlines()
    return next((json.loads(x) for x in lines if '"kind":"finish"' in x), {})


def _beats(run_dir, rank: int) -> list[dict]:
    out = []
    for x in (run_dir / "ranks" / str(rank) / "heartbeat.jsonl").read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(x))
        except ValueError:  # the ring's padding
            pass
    return out


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_of_loop_counts_its_steps(tmp_path, shape):
    r = ddpdoctor(script_argv("hang", SCRIPT, "--", "--shape", shape), tmp_path, timeout=180)
    assert r.code == 0 and r.report is not None, (r.out + r.err)[-3000:]
    said, ends = SHAPES[shape]
    assert [x["detail"] for x in r.report["ranks"]] == [f"finished (exit code 0); {said}"] * 2
    assert [_finish(r.run_dir, rank)["step_ends"] for rank in (0, 1)] == [ends] * 2


def test_steps_stops_an_accumulating_job_at_its_optimizer_steps(tmp_path):
    """Each rank stalls after its 5th optimizer step (20 forwards): ``--steps 5`` ends the run there, with
    every rank's last beat at exactly 5 steps (counting forwards, it would have ended after the 2nd)."""
    argv = script_argv("check", SCRIPT, "--steps", "5", "--", "--shape", "accum", "--stall-after", "5")
    r = ddpdoctor(argv, tmp_path, 180)
    assert r.code == 0, (r.out + r.err)[-3000:]
    assert "--steps 5 reached" in r.out + r.err, (r.out + r.err)[-2000:]
    for rank in (0, 1):
        beats = _beats(r.run_dir, rank)
        assert beats and beats[-1].get("steps") == 5 and beats[-1].get("step") == 20, beats[-1:]
