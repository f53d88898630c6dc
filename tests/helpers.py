"""Run ddpdoctor for real (a subprocess, real torchrun ranks on gloo) and prove nothing is left behind."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from ddpdoctor.commands import COMMANDS

TESTS = Path(__file__).resolve().parent  # tests/: the data folders (scripts/, corpus/, golden/, ...) sit here
ROOT = TESTS.parent
PROBES = ROOT / "probes"
# the commands that run a script take --run-dir; analyze takes --json too (the registry, not a list kept here)
RUN_COMMANDS = frozenset(COMMANDS)
JSON_COMMANDS = RUN_COMMANDS | {"analyze"}
TOKEN_VAR = "DDPDOCTOR_TEST_TOKEN"  # set by the tests on ddpdoctor's own process, inherited by its tree


@dataclass
class Result:
    code: int
    out: str
    err: str
    run_dir: Path
    report: dict | None


FRAMEWORKS_EXTRA = "(pip install -e '.[frameworks]')"


def needs(module: str) -> pytest.MarkDecorator:
    """Skip unless ``module`` (a package of the `frameworks` extra) is installed. The conftest marks such
    tests ``frameworks``: CI's last step installs the extra and runs ``pytest -m frameworks``."""
    return pytest.mark.skipif(
        importlib.util.find_spec(module) is None, reason=f"{module} is not installed {FRAMEWORKS_EXTRA}"
    )


# A busy loop that keeps one core busy, and ends by itself once its parent is gone (a test run killed with
# SIGTERM or SIGKILL never runs its teardown: an orphaned loop would load the host for good). The parent is
# checked every 100,000 iterations (a few milliseconds).
_HOG = "import os\np = os.getppid()\nwhile os.getppid() == p:\n    for _ in range(100_000):\n        pass\n"


def cpu_hog() -> subprocess.Popen:
    """Start one busy loop (its own session; end it by pid: ``kill()`` then ``wait()``)."""
    return subprocess.Popen([sys.executable, "-c", _HOG], start_new_session=True)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it; a race with another binder is
    possible but the kernel does not hand the same ephemeral port out again soon)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def marker_line(path: Path, marker: str) -> int:
    """The line number of the probe line that carries ``# MARKER``."""
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if re.search(rf"#\s*{re.escape(marker)}\b", line):
            return i
    raise AssertionError(f"no marker {marker} in {path}")


def processes_with_token(token: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if p.pid == os.getpid():
                continue
            if f"{TOKEN_VAR}={token}" in "\0".join(f"{k}={v}" for k, v in p.environ().items()):
                found.append(p)
        except psutil.Error:
            continue
    return found


def assert_no_orphans(token: str, wait: float = 10.0) -> None:
    deadline = time.time() + wait
    left = processes_with_token(token)
    while left and time.time() < deadline:
        time.sleep(0.2)
        left = processes_with_token(token)
    if left:
        desc = [(p.pid, " ".join(p.cmdline())[:120]) for p in left if p.is_running()]
        for p in left:
            try:
                p.kill()
            except psutil.Error:
                pass
        raise AssertionError(f"processes left behind: {desc}")


def ddpdoctor(
    args: list[str],
    tmp: Path,
    timeout: float = 120,
    json_report: bool = True,
    run_dir: Path | None = None,
    cwd: Path | None = None,
    env: dict | None = None,
) -> Result:
    """Run ``python -m ddpdoctor ARGS`` to completion (bounded), then prove no process survived."""
    token = uuid.uuid4().hex
    run_dir = run_dir or tmp / f"run-{token[:8]}"
    cmd = [sys.executable, "-m", "ddpdoctor", *args]
    jpath = tmp / f"report-{token[:8]}.json"
    if args and args[0] in RUN_COMMANDS:
        cmd[4:4] = ["--run-dir", str(run_dir)]
    if json_report and args and args[0] in JSON_COMMANDS:
        cmd[4:4] = ["--json", str(jpath)]
    env = dict(os.environ, **(env or {}), **{TOKEN_VAR: token})
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True, cwd=cwd or tmp
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=10)
        assert_no_orphans(token)
        raise AssertionError(f"ddpdoctor did not finish in {timeout} s\n{err[-3000:]}")
    assert_no_orphans(token)
    report = json.loads(jpath.read_text()) if jpath.exists() else None
    return Result(proc.returncode, out, err, run_dir, report)


def seen(text: str) -> dict:
    """What each rank printed as ``SEEN {json}`` (one write per line), by its ``rank`` field as printed."""
    out = {}
    dec = json.JSONDecoder()
    for chunk in text.split("SEEN ")[1:]:
        d, _end = dec.raw_decode(chunk)
        out[d["rank"]] = d
    return out


def finding(report: dict, fid: str) -> dict:
    ids = [f["id"] for f in report["findings"]]
    assert fid in ids, f"expected {fid}, got {ids}: {[f['message'] for f in report['findings']]}"
    return next(f for f in report["findings"] if f["id"] == fid)


def loc_of(f: dict, rank: int) -> tuple[str, int]:
    locs = [(l["file"], l["line"]) for l in f["locations"] if l["rank"] == rank]
    assert locs, f"no location for rank {rank} in {f['locations']}"
    return locs[0]


def lines_of(f: dict, rank: int) -> set[int]:
    return {l["line"] for l in f["locations"] if l["rank"] == rank}


def script_argv(command: str, script: object, *extra: str) -> list[str]:
    """The command line a user types, in torchrun's order: ``COMMAND [OPTIONS] SCRIPT [ARGS]...``, from
    ``extra`` written as ``OPTIONS [-- ARGS]`` (everything after the script is the script's)."""
    rest = list(extra)
    opts, args = (rest[: rest.index("--")], rest[rest.index("--") + 1 :]) if "--" in rest else (rest, [])
    return [command, *opts, str(script), *args]
