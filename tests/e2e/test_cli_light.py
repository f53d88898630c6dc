"""`ddpdoctor --help` and the analysis of a saved run never import torch; the wheel carries the probes."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from helpers import PROBES, ROOT

CHECK = """
import sys
from ddpdoctor.cli import main
try:
    main({args!r})
except SystemExit as e:
    code = e.code
print("TORCH_IMPORTED" if "torch" in sys.modules else "NO_TORCH", code, file=sys.stderr)
"""


def run_cli_in_process(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHECK.format(args=args)], capture_output=True, text=True, timeout=60)


def test_analyze_does_not_import_torch(shared_job):
    r = shared_job.run(["hang", str(PROBES / "shape_mismatch.py")])
    assert r.code == 3
    a = run_cli_in_process(["analyze", str(r.run_dir)])
    assert "NO_TORCH 3" in a.stderr, a.stderr[-2000:]
    assert "hang.shape-mismatch" in a.stdout


def test_run_directory_is_private(shared_job):
    r = shared_job.run(["hang", str(PROBES / "shape_mismatch.py")])
    assert (r.run_dir.stat().st_mode & 0o777) == 0o700
    logs = r.run_dir / "logs"  # torchrun's own --log-dir files, inside the private directory
    for p in r.run_dir.rglob("*"):
        if logs not in p.parents:
            assert p.stat().st_mode & 0o077 == 0, p


def test_wheel_carries_the_probes_and_installs_them(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(ROOT),
        ],
        check=True,
        timeout=300,
        capture_output=True,
    )
    wheel = next((tmp_path / "dist").glob("ddpdoctor-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for probe in PROBES.glob("*.py"):
        assert f"ddpdoctor/probes/{probe.name}" in names
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    out = subprocess.run(
        [
            str(py),
            "-c",
            "from importlib.resources import files; "
            "p = files('ddpdoctor.probes') / 'healthy.py'; print(p, p.is_file())",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=tmp_path,
    ).stdout
    path, ok = out.split()
    assert ok == "True" and Path(path).is_relative_to(venv)
