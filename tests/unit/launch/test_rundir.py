"""The run directory (launch/rundir.py): private 0700 folders, a manifest the reader accepts with the
caller's fields, a non-empty directory refused, and a path that cannot be made refused in one line."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ddpdoctor.errors import DdpdoctorError, ExitCode
from ddpdoctor.launch.rundir import create, default_run_dir, run_name
from ddpdoctor.record.reader import read_manifest


def test_create_makes_a_private_run_directory_with_a_readable_manifest(tmp_path: Path) -> None:
    path = create(str(tmp_path / "deep" / "run"), {"command": "check", "script": "/w/train.py"})
    assert path == str(tmp_path / "deep" / "run")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    assert sorted(os.listdir(path)) == ["control", "logs", "manifest.json", "ranks"]
    m = read_manifest(path)
    assert m["command"] == "check" and m["script"] == "/w/train.py"
    assert m["monitor_pid"] == os.getpid() and "PATH" in m["user_env_keys"]


def test_an_empty_existing_directory_is_used_and_a_non_empty_one_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert create(str(tmp_path / "empty"), {}) == str(tmp_path / "empty")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("")
    with pytest.raises(DdpdoctorError, match="exists and is not empty; choose a new --run-dir") as exc:
        create(str(tmp_path / "used"), {})
    assert exc.value.exit_code == ExitCode.USAGE


def test_a_path_under_a_file_is_refused_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(
        DdpdoctorError, match=r"^cannot create run directory .*/file/run: (File exists|Not a directory)$"
    ):
        create(str(tmp_path / "file" / "run"), {})


def test_the_default_run_directory_is_under_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    d = Path(default_run_dir("memleak"))
    assert d.parent == tmp_path / "ddpdoctor-runs"
    assert d.name.startswith("memleak-") and d.name.endswith(f"-{os.getpid()}")


def test_under_slurm_the_run_directory_names_the_step_node_and_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {
        "SLURM_JOB_ID": "4242",
        "SLURM_STEP_ID": "1",
        "SLURM_STEP_NODELIST": "gpu[07-08]",
        "SLURMD_NODENAME": "gpu08",
    }
    assert run_name("hang", env, "20260101-120000", 7) == "hang-4242.1-n1-gpu08-20260101-120000"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("ddpdoctor.launch.rundir.time.strftime", lambda fmt: "20260101-120000")
    # made atomically: two processes of one node and second never get the same directory
    a, b = default_run_dir("hang", env), default_run_dir("hang", env)
    assert a != b and os.path.isdir(a) and os.path.isdir(b) and b == a + "-2"
    assert create(a, {}) == a  # the command fills the empty directory it was given
