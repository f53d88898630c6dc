"""Jobs started the way a user starts them, without ddpdoctor (plain torchrun, plain mp.spawn), for the
``attach`` tests: each in its own session, ended by process group, with proof that nothing is left."""

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
from helpers import TOKEN_VAR, assert_no_orphans, ddpdoctor

C10D = "distributed_c10d.py"


def user_line(pid: int, script: Path, in_collective: bool = True) -> int | None:
    """The line of ``script`` the rank's main thread is at, if it sits inside a torch.distributed call (or
    anywhere: ``in_collective=False``, a rank busy in its own code)."""
    exe = os.path.join(os.path.dirname(sys.executable), "py-spy")
    cp = subprocess.run(
        [exe, "dump", "--pid", str(pid), "--json", "--nonblocking"], capture_output=True, text=True, timeout=20
    )
    try:
        frames = json.loads(cp.stdout)[0]["frames"]
    except (ValueError, IndexError, KeyError):
        return None
    names = [f["filename"] for f in frames]
    if in_collective and not any(n.endswith(C10D) or n.endswith("torch/autograd/graph.py") for n in names):
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

    def wait_hung(self, script: Path, lines: dict[int, int], limit: float = 90.0, busy: tuple[int, ...] = ()) -> None:
        """Until rank i (i-th child) sits in a collective at ``lines[i]`` (bounded); the ranks in ``busy`` sit
        at their line outside any collective."""
        deadline = time.time() + limit
        while time.time() < deadline:
            ranks = self.ranks()
            if len(ranks) == len(lines) and all(
                user_line(p.pid, script, in_collective=i not in busy) == lines[i] for i, p in enumerate(ranks)
            ):
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


def attach(tmp: Path, *args: str) -> tuple[int, dict, str]:
    """``ddpdoctor attach ARGS --json FILE``: its exit code, JSON report and stderr."""
    out = tmp / f"attach-{uuid.uuid4().hex[:6]}.json"
    res = ddpdoctor(["attach", *args, "--json", str(out)], tmp, timeout=120, json_report=False)
    return res.code, json.loads(out.read_text()) if out.exists() else {}, res.err
