"""Every process ddpdoctor starts is ended, whether the run ends by itself, on a verdict, on Ctrl-C,
or because ddpdoctor itself was killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from helpers import PROBES, TOKEN_VAR, assert_no_orphans, processes_with_token


def start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, str, Path]:
    token = uuid.uuid4().hex
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddpdoctor", "hang", "--run-dir", str(run_dir), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, **{TOKEN_VAR: token}),
        start_new_session=True,
        cwd=tmp_path,
    )
    return proc, token, run_dir


def wait_for_ranks(run_dir: Path, n: int = 2, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        hbs = list((run_dir / "ranks").glob("*/heartbeat.jsonl"))
        if len(hbs) >= n and all(h.stat().st_size > 0 for h in hbs):
            return
        time.sleep(0.2)
    raise AssertionError("ranks did not start")


def test_ctrl_c_ends_the_whole_tree_and_keeps_the_records(tmp_path):
    proc, token, run_dir = start(tmp_path, "--timeout", "300", str(PROBES / "slow_rank.py"))
    try:
        wait_for_ranks(run_dir)
        assert len(processes_with_token(token)) >= 4  # ddpdoctor, torchrun, two ranks
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in out
    assert (run_dir / "ranks" / "1" / "heartbeat.jsonl").stat().st_size > 0
    assert_no_orphans(token)


def test_ranks_end_themselves_when_ddpdoctor_is_killed(tmp_path):
    proc, token, run_dir = start(tmp_path, "--timeout", "300", str(PROBES / "slow_rank.py"))
    try:
        wait_for_ranks(run_dir)
        os.kill(proc.pid, signal.SIGKILL)  # ddpdoctor only, not its process group
        proc.communicate(timeout=10)
        assert_no_orphans(token, wait=20)
    finally:
        for p in processes_with_token(token):
            p.kill()


@pytest.mark.parametrize("sig", [signal.SIGTERM])
def test_sigterm_is_handled_like_ctrl_c(tmp_path, sig):
    proc, token, run_dir = start(tmp_path, "--timeout", "300", str(PROBES / "slow_rank.py"))
    try:
        wait_for_ranks(run_dir)
        proc.send_signal(sig)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130
    assert_no_orphans(token)
