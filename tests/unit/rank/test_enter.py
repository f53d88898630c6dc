"""rank.enter and launch.entry: the environment that lets the probes into a user's launch command's ranks,
and its removal from a rank's environment. In-process and in plain Python subprocesses (no torch): what a
process that never initialises a process group sees, and that a user's own sitecustomize still runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ddpdoctor.launch.entry import entry_dir, entry_env
from ddpdoctor.rank import enter
from ddpdoctor.record.schema import ENTER_ENV


@pytest.mark.parametrize(
    "argv, launcher",
    [
        (["python", "-m", "torch.distributed.run", "--nproc-per-node", "2", "t.py"], True),
        (["python", "/venv/bin/torchrun", "t.py"], True),
        (["python", "/venv/bin/accelerate", "launch", "t.py"], True),
        (["python", "-u", "t.py"], False),
        (["python", "-m", "pkg.train"], False),
    ],
)
def test_a_launcher_is_told_by_how_python_was_started(argv, launcher):
    assert enter.is_launcher(argv) is launcher
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}
    assert enter.looks_like_rank(env, argv) is (not launcher)
    assert not enter.looks_like_rank({"RANK": "0"}, ["python", "t.py"])  # a worker has all three


@pytest.mark.parametrize("user", [None, "/u/lib", ""])
def test_the_rank_gets_the_users_pythonpath_back(user):
    base = {} if user is None else {"PYTHONPATH": user}
    added = entry_env("/run", base)
    cfg = json.loads(added[ENTER_ENV])
    env = {**base, **added}
    enter.restore_env(env, cfg)
    assert env == base


def test_what_a_script_added_to_pythonpath_in_front_is_kept():
    added = entry_env("/run", {"PYTHONPATH": "/u/lib"})
    cfg = json.loads(added[ENTER_ENV])
    env = {"PYTHONPATH": "/mine" + os.pathsep + added["PYTHONPATH"], ENTER_ENV: added[ENTER_ENV]}
    enter.restore_env(env, cfg)
    assert env == {"PYTHONPATH": os.pathsep.join(["/mine", "/u/lib"])}


SHOW = (
    "import json, os, sys; print(json.dumps({'path': sys.path, 'enter': os.environ.get('DDPDOCTOR_ENTER'), "
    "'pp': os.environ.get('PYTHONPATH'), 'torch': 'torch' in sys.modules, "
    "'site': getattr(sys.modules.get('sitecustomize'), 'MARK', None)}))"
)


def _show(tmp_path, env_extra: dict, user_pp: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", ENTER_ENV)}
    if user_pp is not None:
        env["PYTHONPATH"] = user_pp
    env.update(entry_env(str(tmp_path), env))
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", SHOW], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_process_that_is_not_a_rank_keeps_the_variables_for_its_children_and_imports_no_torch(tmp_path):
    got = _show(tmp_path, {}, None)
    assert entry_dir() not in got["path"]
    assert got["enter"] is not None and got["pp"] == entry_dir()  # a launcher's children need them
    assert got["torch"] is False


def test_a_launchers_worker_sees_its_own_environment_and_the_users_sitecustomize_runs(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "sitecustomize.py").write_text("MARK = 'users'\n")
    got = _show(tmp_path, {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}, str(mine))
    assert got["enter"] is None and got["pp"] == str(mine)
    assert entry_dir() not in got["path"] and str(mine) in got["path"]
    assert got["site"] == "users"
