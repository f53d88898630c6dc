"""pytest plugin (entry point ``pytest11``): the fixture ``ddpdoctor_run`` runs a training script under
ddpdoctor (real torchrun ranks) and returns its report.

    def test_train_is_healthy(ddpdoctor_run):
        report = ddpdoctor_run("train.py", command="check", nproc=2, args=["--epochs", "1"], steps=20)
        report.assert_healthy()

Options become the command's own options (``steps=20`` -> ``--steps 20``, ``fail_on="warning"`` ->
``--fail-on warning``; ``True`` -> a bare flag). Each run is a subprocess in a session of its own, bounded
by ``timeout`` (seconds, default 300) and ended with its whole process tree; the run directory is under
the test's ``tmp_path``. Loading the plugin imports neither torch nor the rest of ddpdoctor.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest


@dataclass
class DdpdoctorReport:
    """What ``ddpdoctor_run`` returns: the JSON report (docs/json-schema.md) and the text report."""

    exit_code: int
    verdict: str
    findings: list[dict[str, Any]]
    text: str
    run_dir: str
    json: dict[str, Any] = field(default_factory=dict)
    stderr: str = ""

    def ids(self, severity: str | None = None) -> list[str]:
        return [f["id"] for f in self.findings if severity is None or f["severity"] == severity]

    def finding(self, fid: str) -> dict[str, Any]:
        for f in self.findings:
            if f["id"] == fid:
                return f
        raise AssertionError(f"no finding {fid}; findings: {self.ids() or 'none'}\n{self.text}")

    def assert_healthy(self) -> None:
        """Fail the test with ddpdoctor's text report unless the run was healthy (exit code 0)."""
        if self.exit_code != 0:
            pytest.fail(
                f"ddpdoctor: {self.verdict} (exit code {self.exit_code})\n{self.text}"
                + (f"\n{self.stderr[-2000:]}" if not self.findings else ""),
                pytrace=False,
            )


def _option_args(options: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for k, v in options.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            out.append(flag)
        elif v is False or v is None:
            continue
        elif isinstance(v, (list, tuple)):
            for x in v:
                out += [flag, str(x)]
        else:
            out += [flag, str(v)]
    return out


def _end_group(proc: subprocess.Popen) -> None:
    """The ddpdoctor process ends its own tree; should it be stuck, its session goes, by process group id."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


def run(
    script: str | os.PathLike,
    tmp: Path,
    command: str = "check",
    nproc: int = 2,
    args: Any = (),
    timeout: float = 300.0,
    **options: Any,
) -> DdpdoctorReport:
    tmp.mkdir(parents=True, exist_ok=True)
    n = len(list(tmp.glob("ddpdoctor-run-*")))
    run_dir = tmp / f"ddpdoctor-run-{n}"
    jpath = tmp / f"ddpdoctor-report-{n}.json"
    cmd = [
        sys.executable,
        "-m",
        "ddpdoctor",
        command,
        "--nproc-per-node",
        str(nproc),
        "--run-dir",
        str(run_dir),
        "--json",
        str(jpath),
        *_option_args(options),
        str(script),
    ]
    cmd += [str(a) for a in args]  # after the script, the script's (torchrun's rule)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _end_group(proc)
        out, err = proc.communicate(timeout=10)
        pytest.fail(f"ddpdoctor {command} did not finish within {timeout:g} s\n{err[-3000:]}", pytrace=False)
    if not jpath.exists():
        return DdpdoctorReport(proc.returncode, "error", [], out + err, str(run_dir), {}, err)
    rep = json.loads(jpath.read_text())
    return DdpdoctorReport(proc.returncode, rep["verdict"], rep["findings"], out, rep["run_dir"], rep, err)


@pytest.fixture
def ddpdoctor_run(tmp_path: Path) -> Callable[..., DdpdoctorReport]:
    """``ddpdoctor_run(script, command="check", nproc=2, args=(), **options)`` -> the report."""

    def _run(
        script: str | os.PathLike, command: str = "check", nproc: int = 2, args: Any = (), **options: Any
    ) -> DdpdoctorReport:
        return run(script, tmp_path / "ddpdoctor", command, nproc, args, **options)

    return _run
