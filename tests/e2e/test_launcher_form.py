"""Issue 52: the launcher form, ``ddpdoctor hang [OPTIONS] -- COMMAND...``: the user's own launch command
(``accelerate launch``, a shell script that calls torchrun itself) runs as it is, and the probes enter its
Python ranks through the environment (rank/enter.py). Real jobs on gloo: each launcher healthy (exit 0, no
error finding) and with a planted rank-conditional collective (id, culprit, line); the rank sees what it sees
without the tool (argv, sys.path, environment, the user's PYTHONPATH and own sitecustomize); a rank the probes
cannot enter is named (torchrun's --no-python, one rank run with ``python -E``). Several jobs: the ``extended``
tier (``pytest -m extended tests/e2e``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TOKEN_VAR, ddpdoctor, finding, loc_of, marker_line, needs, seen

pytestmark = pytest.mark.extended

JOB = """\
import json, os, sys

import torch
import torch.distributed as dist


def worker(_i):
    tool = sorted(m for m in sys.modules if m.startswith("ddpdoctor"))
    sys.stdout.write("WORKER " + json.dumps({"tool": tool, "env": "DDPDOCTOR_ENTER" in os.environ,
                     "meta": [type(f).__name__ for f in sys.meta_path]}) + "\\n")
    sys.stdout.flush()


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    site = getattr(sys.modules.get("sitecustomize"), "MARK", None)
    sys.stdout.write("SEEN " + json.dumps({"rank": rank, "argv": sys.argv, "path": sys.path, "env": sorted(os.environ),
                     "pythonpath": os.environ.get("PYTHONPATH"), "site": site}) + "\\n")
    sys.stdout.flush()
    if "--loader" in sys.argv:  # a DataLoader worker of its own process (spawn): untouched by the tool
        loader = torch.utils.data.DataLoader(list(range(4)), num_workers=1, multiprocessing_context="spawn",
                                             worker_init_fn=worker)
        sum(int(b.sum()) for b in loader)
    t = torch.ones(1)
    for step in range(12):
        dist.all_reduce(t)  # EVERY
        if rank == 1 and step == 4 and "--plant" in sys.argv:
            dist.all_reduce(t)  # PLANTED
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""

RUN_SH = """\
#!/bin/bash
# a site's launch script: it sets the environment and calls torchrun itself
set -e
cd "$(dirname "$0")"
export PYTHONPATH="$PWD/extra${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 job.py "$@"
"""


def _job(tmp_path: Path) -> tuple[Path, dict]:
    """The job, run.sh, and the user's environment: a PYTHONPATH folder of their own holding their own
    sitecustomize (which must still run)."""
    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "run.sh").write_text(RUN_SH)
    (tmp_path / "extra").mkdir()
    mine = tmp_path / "mysite"
    mine.mkdir()
    (mine / "sitecustomize.py").write_text("MARK = 'the user sitecustomize ran'\n")
    return tmp_path / "job.py", {"PYTHONPATH": str(mine), "PY": sys.executable}


def _errors(report: dict) -> list[str]:
    # teardown.gloo-abort: torch 2.13's own abort of a finished gloo rank at exit, also under bare torchrun
    return [f["id"] for f in report["findings"] if f["severity"] == "error" and f["id"] != "teardown.gloo-abort"]


def _accelerate() -> list[str]:
    return [
        str(Path(sys.executable).parent / "accelerate"),
        "launch",
        "--multi_gpu",  # accelerate's torchrun path; on a CPU host its ranks run gloo
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
    ]


def test_a_shell_script_that_calls_torchrun_runs_as_it_is_and_its_ranks_see_what_they_see_without_the_tool(
    tmp_path,
):
    script, env = _job(tmp_path)
    base = {k: v for k, v in os.environ.items() if k != TOKEN_VAR}
    bare = subprocess.run(
        ["bash", str(tmp_path / "run.sh"), "--loader"], env={**base, **env}, capture_output=True, text=True, timeout=120
    )
    assert bare.returncode == 0, bare.stderr[-2000:]
    r = ddpdoctor(["hang", "--timeout", "60", "--", "bash", str(tmp_path / "run.sh"), "--loader"], tmp_path, env=env)
    assert r.code == 0, r.err[-3000:]
    assert r.report["verdict"] == "ok" and _errors(r.report) == []
    plain, ours = seen(bare.stdout), seen(r.out)
    assert set(plain) == set(ours) == {0, 1}
    for rank in plain:
        p, o = plain[rank], ours[rank]
        assert o["argv"] == p["argv"] == ["job.py", "--loader"]
        assert o["path"] == p["path"]  # ddpdoctor's entry folder is gone; the user's folders are where they were
        assert o["pythonpath"] == p["pythonpath"] == f"{tmp_path / 'extra'}:{env['PYTHONPATH']}"
        assert set(o["env"]) - {TOKEN_VAR} == set(p["env"]), set(o["env"]) ^ set(p["env"])
        assert o["site"] == p["site"] == "the user sitecustomize ran"
    # the ranks' DataLoader workers (spawned: a Python process of their own) saw nothing of the tool
    workers = [json.loads(line.split("WORKER ", 1)[1]) for line in r.out.splitlines() if "WORKER " in line]
    plain_workers = [json.loads(line.split("WORKER ", 1)[1]) for line in bare.stdout.splitlines() if "WORKER " in line]
    assert len(workers) == len(plain_workers) == 2
    assert all(w == plain_workers[0] and w["tool"] == [] and not w["env"] for w in workers), workers
    # the probes were in both ranks: their records, as under ddpdoctor's own torchrun
    # (their heartbeats, and torch's flight record of their collectives, the rank's record by default)
    assert all((r.run_dir / "ranks" / str(k) / "heartbeat.jsonl").stat().st_size > 0 for k in (0, 1))
    assert all(json.loads((r.run_dir / "ranks" / str(k) / "flight.json").read_text())["entries"] for k in (0, 1))


def test_a_shell_script_that_calls_torchrun_gets_the_rank_conditional_collective_with_culprit_and_line(tmp_path):
    script, env = _job(tmp_path)
    r = ddpdoctor(["hang", "--timeout", "60", "--", "bash", str(tmp_path / "run.sh"), "--plant"], tmp_path, env=env)
    assert r.code == 3, r.err[-3000:]
    f = finding(r.report, "hang.rank-conditional-collective")
    assert f["culprits"] == [1]
    assert loc_of(f, 1) == (str(script), marker_line(script, "PLANTED"))


@needs("accelerate")
def test_accelerate_launch_healthy(tmp_path):
    script, env = _job(tmp_path)
    r = ddpdoctor(["hang", "--timeout", "60", "--", *_accelerate(), str(script)], tmp_path, env=env)
    assert r.code == 0, r.err[-3000:]
    assert r.report["verdict"] == "ok" and _errors(r.report) == []
    ranks = seen(r.out)
    assert set(ranks) == {0, 1}
    for d in ranks.values():
        assert d["pythonpath"] == env["PYTHONPATH"] and d["site"] == "the user sitecustomize ran"
        assert "DDPDOCTOR_ENTER" not in d["env"] and not any("ddpdoctor/rank/entry" in p for p in d["path"])


@needs("accelerate")
def test_accelerate_launch_gets_the_rank_conditional_collective_with_culprit_and_line(tmp_path):
    script, env = _job(tmp_path)
    r = ddpdoctor(["hang", "--timeout", "60", "--", *_accelerate(), str(script), "--plant"], tmp_path, env=env)
    assert r.code == 3, r.err[-3000:]
    f = finding(r.report, "hang.rank-conditional-collective")
    assert f["culprits"] == [1]
    assert loc_of(f, 1) == (str(script), marker_line(script, "PLANTED"))


RANK_SH = """\
#!/bin/sh
# torchrun --no-python runs this in every rank; rank 1 starts Python with -E, which ignores PYTHONPATH
if [ "$RANK" = 1 ]; then exec "$PY" -E job.py; fi
exec "$PY" job.py
"""


def test_no_python_takes_the_same_path_and_a_rank_the_probes_could_not_enter_is_named(tmp_path):
    script, env = _job(tmp_path)
    (tmp_path / "rank.sh").write_text(RANK_SH)
    (tmp_path / "rank.sh").chmod(0o755)
    r = ddpdoctor(["hang", "--timeout", "60", "--nproc-per-node", "2", "--no-python", "./rank.sh"], tmp_path, env=env)
    assert r.code == 4, r.err[-3000:]
    f = finding(r.report, "launch.rank-not-entered")
    assert f["culprits"] == [1] and "rank 1" in f["message"]
    assert r.report["verdict"] != "ok"
    assert (r.run_dir / "ranks" / "0" / "heartbeat.jsonl").exists() and not (r.run_dir / "ranks" / "1").exists()
