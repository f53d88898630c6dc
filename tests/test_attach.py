"""`ddpdoctor attach`: real DDP jobs started WITHOUT ddpdoctor (plain torchrun, plain mp.spawn), hung in a
collective, diagnosed from py-spy stacks; the job keeps running unless --kill; nothing is left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
from helpers import PROBES, TOKEN_VAR, assert_no_orphans, ddpdoctor, finding, lines_of, marker_line

pytestmark = pytest.mark.skipif(
    not os.access(os.path.join(os.path.dirname(sys.executable), "py-spy"), os.X_OK),
    reason="py-spy is not installed next to this Python",
)
C10D = "distributed_c10d.py"


def _user_line(pid: int, script: Path) -> int | None:
    """The line of ``script`` the rank's main thread is at, if it sits inside a torch.distributed call."""
    exe = os.path.join(os.path.dirname(sys.executable), "py-spy")
    cp = subprocess.run(
        [exe, "dump", "--pid", str(pid), "--json", "--nonblocking"], capture_output=True, text=True, timeout=20
    )
    try:
        frames = json.loads(cp.stdout)[0]["frames"]
    except (ValueError, IndexError, KeyError):
        return None
    names = [f["filename"] for f in frames]
    if not any(n.endswith(C10D) or n.endswith("torch/autograd/graph.py") for n in names):
        return None
    return next((f["line"] for f in frames if f["filename"] == str(script)), None)


class Job:
    """A DDP job started the way a user starts it, in its own session; ended by process group."""

    def __init__(self, argv: list[str], tmp: Path, env: dict[str, str] | None = None) -> None:
        self.token = uuid.uuid4().hex
        self.log = open(tmp / f"job-{self.token[:6]}.log", "w")
        self.proc = subprocess.Popen(
            argv,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=tmp,
            start_new_session=True,
            env=dict(os.environ, **(env or {}), **{TOKEN_VAR: self.token}),
        )

    def ranks(self) -> list[psutil.Process]:
        kids = psutil.Process(self.proc.pid).children()
        return [k for k in kids if "resource_tracker" not in " ".join(k.cmdline())]

    def wait_hung(self, script: Path, lines: dict[int, int], limit: float = 90.0) -> None:
        """Until rank i (i-th child) sits in a collective at ``lines[i]`` (bounded)."""
        deadline = time.time() + limit
        while time.time() < deadline:
            ranks = self.ranks()
            if len(ranks) == len(lines) and all(_user_line(p.pid, script) == lines[i] for i, p in enumerate(ranks)):
                return
            time.sleep(0.5)
        raise AssertionError(f"the job did not reach its hang in {limit} s")

    def alive(self) -> bool:
        procs = [psutil.Process(self.proc.pid)] + self.ranks()
        return all(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in procs)

    def end(self) -> None:
        try:  # torchrun starts each worker in its own session: remember them before the agent goes
            left = [p for k in psutil.Process(self.proc.pid).children() for p in [k, *k.children(recursive=True)]]
        except psutil.Error:
            left = []
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)
        for p in left:
            try:
                p.kill()
            except psutil.Error:
                pass
        self.log.close()
        assert_no_orphans(self.token)


def _attach(tmp: Path, *args: str) -> tuple[int, dict, str]:
    out = tmp / f"attach-{uuid.uuid4().hex[:6]}.json"
    res = ddpdoctor(["attach", *args, "--json", str(out)], tmp, timeout=120, json_report=False)
    return res.code, json.loads(out.read_text()) if out.exists() else {}, res.err


def test_attach_torchrun_rank_conditional_then_analyze(tmp_path: Path) -> None:
    script = PROBES / "rank_conditional.py"
    job = Job(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script)], tmp_path
    )
    try:
        job.wait_hung(script, {0: marker_line(script, "REGULAR"), 1: marker_line(script, "END")})
        run_dir = tmp_path / "attach-run"
        t0 = time.time()
        code, rep, err = _attach(tmp_path, "--pid", str(job.proc.pid), "--no-native", "--run-dir", str(run_dir))
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


def test_attach_spawn_from_a_rank_with_native_frames_and_kill(tmp_path: Path) -> None:
    script = PROBES / "spawn_conditional.py"
    job = Job([sys.executable, str(script)], tmp_path)
    try:
        job.wait_hung(script, {0: marker_line(script, "EXTRA"), 1: 29})
        rank1 = job.ranks()[1].pid
        run_dir = tmp_path / "spawn-run"
        code, rep, err = _attach(tmp_path, "--pid", str(rank1), "--kill", "--run-dir", str(run_dir))
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

_SCRIPT = """import torch.distributed as dist
def main(rank, model, opt, data):
    for step in range(8):
        loss = model(data).sum()
        loss.backward()
        dist.all_reduce(loss)
        if rank == 1 and step == 2:
            break
    dist.barrier()
main(0, None, None, None)
"""
_TORCH = "/venv/lib/python3.11/site-packages/torch"
_BACKWARD = [[f"{_TORCH}/_tensor.py", 623, "backward"], [f"{_TORCH}/autograd/__init__.py", 395, "backward"]]
_BARRIER = [
    [f"{_TORCH}/distributed/c10d_logger.py", 83, "wrapper"],
    [f"{_TORCH}/distributed/distributed_c10d.py", 5356, "barrier"],
]
_ALLREDUCE = [
    [f"{_TORCH}/distributed/c10d_logger.py", 83, "wrapper"],
    [f"{_TORCH}/distributed/distributed_c10d.py", 3252, "all_reduce"],
]


def _record(tmp: Path, stacks: dict[int, tuple[int, list, bool]], gone: tuple[int, ...] = (), world: int = 2):
    from builder import RunBuilder

    from ddpdoctor.analysis import diagnose
    from ddpdoctor.analysis.config import Config
    from ddpdoctor.record.reader import load_run

    tmp.mkdir(parents=True, exist_ok=True)
    script = tmp / "train.py"
    script.write_text(_SCRIPT)
    b = RunBuilder(tmp / "run", script=str(script), command="attach", attach={"interval": 1.0})
    for r, (line, torch_frames, moved) in stacks.items():
        b.add(r, "events.jsonl", "start", 1.0, pid=1000 + r, local_rank=r)
        b.add(r, "events.jsonl", "init", 1.0, world_size=world)
        stack = [[str(script), 10, "<module>"], [str(script), line, "main"], *torch_frames]
        b.add(
            r,
            "stacks.jsonl",
            "stacks",
            2.0,
            threads=[{"main": True, "name": "MainThread", "stack": stack}],
            moved=moved,
            cpu=0.0,
        )
    for r in gone:
        b.add(r, "events.jsonl", "gone", 1.0, world_size=world)
    return diagnose(load_run(str(tmp / "run")), Config())


def test_detector_early_exit_from_stacks(tmp_path: Path) -> None:
    rep = _record(tmp_path, {0: (5, _BACKWARD, False), 1: (9, _BARRIER, False)})
    f = next(f for f in rep.findings if f.id == "hang.early-exit")
    assert f.culprits == (1,) and rep.exit_code == 3
    assert {l.line for l in f.locations if l.rank == 1} >= {8, 9}  # the break it took, where it waits


def test_detector_exited_rank(tmp_path: Path) -> None:
    rep = _record(tmp_path, {0: (5, _BACKWARD, False)}, gone=(1,))
    f = next(f for f in rep.findings if f.id == "hang.early-exit")
    assert f.culprits == (1,) and 8 in {l.line for l in f.locations if l.rank == 1}


def test_detector_same_collective_and_running(tmp_path: Path) -> None:
    rep = _record(tmp_path / "a", {0: (6, _ALLREDUCE, False), 1: (6, _ALLREDUCE, False)})
    assert [f.id for f in rep.findings if f.severity == "error"] == ["hang.transport-stall"]
    assert rep.findings[0].culprits == ()
    rep = _record(tmp_path / "b", {0: (6, _ALLREDUCE, False), 1: (6, _ALLREDUCE, False)}, world=4)
    assert rep.exit_code == 0 and any("other nodes" in f.message for f in rep.findings if f.id == "hang.timeout")
    rep = _record(tmp_path / "c", {0: (4, [], True), 1: (5, _BACKWARD, True)})
    assert [f.id for f in rep.findings] == ["attach.running"] and rep.exit_code == 0
