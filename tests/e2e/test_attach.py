"""`ddpdoctor attach`: real DDP jobs started WITHOUT ddpdoctor (plain torchrun, plain mp.spawn), hung in a
collective, diagnosed from py-spy stacks; the job keeps running unless --kill; nothing is left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import PROBES, ddpdoctor, finding, lines_of, marker_line
from userjobs import Job, attach

pytestmark = pytest.mark.skipif(
    not os.access(os.path.join(os.path.dirname(sys.executable), "py-spy"), os.X_OK),
    reason="py-spy is not installed next to this Python",
)


def test_attach_torchrun_rank_conditional_then_analyze(tmp_path: Path) -> None:
    script = PROBES / "rank_conditional.py"
    job = Job(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script)], tmp_path
    )
    try:
        job.wait_hung(script, {0: marker_line(script, "REGULAR"), 1: marker_line(script, "END")})
        run_dir = tmp_path / "attach-run"
        t0 = time.time()
        code, rep, err = attach(tmp_path, "--pid", str(job.proc.pid), "--no-native", "--run-dir", str(run_dir))
        took = time.time() - t0
        assert code == 3, err
        f = finding(rep, "hang.rank-conditional-collective")
        assert f["culprits"] == [0]
        assert marker_line(script, "EXTRA") in lines_of(f, 0)
        assert marker_line(script, "END") in lines_of(f, 1)
        assert "stacks only" in f["message"]
        # torch 2.13 keeps a flight recorder by default, but gloo offers no trigger without the debug server
        fr = [n for n in rep["notes"] if "flight recorder" in n]
        assert fr == [
            "stacks only, no flight recorder: ranks 0, 1: gloo has no dump trigger and no debug server "
            "runs: start the job's ranks with torch.distributed.debug.start_debug_server()"
        ], fr
        assert job.alive(), "attach must leave the job running"
        assert took < 30, f"attach took {took:.1f} s"
        assert (run_dir.stat().st_mode & 0o777) == 0o700
        # the run directory is a normal one: analyze re-diagnoses it (no torch) with the same finding
        jpath = tmp_path / "analyze.json"
        res = ddpdoctor(["analyze", str(run_dir), "--json", str(jpath)], tmp_path, json_report=False)
        assert res.code == 3, res.err
        g = finding(json.loads(jpath.read_text()), "hang.rank-conditional-collective")
        assert g["culprits"] == [0] and marker_line(script, "EXTRA") in lines_of(g, 0)
        assert job.alive()
    finally:
        job.end()


@pytest.mark.extended  # one of the README tier's slowest jobs (stop 57: the tier read 554-562 s)
def test_attach_spawn_from_a_rank_with_native_frames_and_kill(tmp_path: Path) -> None:
    script = PROBES / "spawn_conditional.py"
    job = Job([sys.executable, str(script)], tmp_path)
    try:
        job.wait_hung(script, {0: marker_line(script, "EXTRA"), 1: 29})
        rank1 = job.ranks()[1].pid
        run_dir = tmp_path / "spawn-run"
        code, rep, err = attach(tmp_path, "--pid", str(rank1), "--kill", "--run-dir", str(run_dir))
        assert code == 3, err
        f = finding(rep, "hang.rank-conditional-collective")
        assert f["culprits"] == [0]
        assert marker_line(script, "EXTRA") in lines_of(f, 0)
        stacks = json.loads((run_dir / "ranks" / "0" / "stacks.jsonl").read_text().splitlines()[0])
        main = next(t for t in stacks["threads"] if t["main"])
        assert any("Work::wait" in n for n in main.get("native", [])), main.get("native")
        deadline = time.time() + 15
        while job.proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert job.proc.poll() is not None, "--kill must end the job"
    finally:
        job.end()  # asserts that no process of the job is left


def test_attach_no_job(tmp_path: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        res = ddpdoctor(["attach", "--pid", str(sleeper.pid)], tmp_path, timeout=60, json_report=False)
        assert res.code == 2
        assert "is not a torchrun agent" in res.err and "Traceback" not in res.err
        assert len(res.err.strip().splitlines()) == 1
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait(timeout=10)


# -- the detector on hand-built attach records (pure: no job, no py-spy) ----------------------------------
