"""Run tests/frjobs/frjob.py under plain torchrun (no ddpdoctor) with the flight recorder on: bounded,
and nothing left behind (the suite's no-orphan helpers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from helpers import TOKEN_VAR, assert_no_orphans

JOB = Path(__file__).resolve().parent / "frjob.py"
TORCH_CASES = JOB.parent / "torchcases.py"  # torch's analyzer test cases as real gloo jobs
ZOO_JOB = JOB.parent / "zoojob.py"  # every kind of call a training script makes
MOE_JOB = JOB.parent / "moejob.py"  # mixture-of-experts routing: all-to-alls with split sizes of each rank
PIPE_JOB = JOB.parent / "pipejob.py"  # two pipeline stages that send to each other and a rank that does not (3 ranks)
MESH_JOB = JOB.parent / "meshjob.py"  # a 2-D device mesh (dp x tp) of four ranks
STAGE_JOB = JOB.parent / "stagejob.py"  # a pipeline of three stages, each sending to the next (3 ranks)


def run_job(
    case: str,
    out: Path,
    timeout: float = 90,
    monitor_interval: float | None = None,
    job: Path = JOB,
    nproc: int = 2,
) -> Path:
    """``job`` (frjob.py or torchcases.py) ``case``, its records in ``out``: ``fr/rank_<r>`` (pickle), ``json/rank_<r>`` (JSON), ``logs/`` (torchrun's
    log folder: error files) and ``torchrun.log`` (the agent's output, with its failure summary)."""
    for sub in ("fr", "json", "logs"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex
    env = dict(
        os.environ,
        TORCH_FR_BUFFER_SIZE="100",
        TORCH_FR_DUMP_TEMP_FILE=str(out / "fr" / "rank_"),
        FRJOB_JSON_PREFIX=str(out / "json" / "rank_"),
        FRJOB_DUMP_REQUEST=str(out / "dump-request"),  # a stalled rank asks the others to dump (frjob.py)
        **{TOKEN_VAR: token},
    )
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        "--standalone",
        "--log-dir",
        str(out / "logs"),
        "--redirects",
        "2",
    ]
    if monitor_interval:
        # the agent notices a dead rank only this late: the others' watchdogs dump first, as on
        # another node of a multi-node job, where no agent ends them at once
        cmd += ["--monitor-interval", str(monitor_interval)]
    cmd += [str(job), case]
    with open(out / "torchrun.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            assert_no_orphans(token)
            raise AssertionError(f"the {case} job did not end in {timeout} s")
    assert_no_orphans(token)
    return out


def dumped(out: Path) -> set[int]:
    """The ranks whose pickle dump is there."""
    return {int(p.name.rsplit("_", 1)[1]) for p in (out / "fr").glob("rank_*") if p.name.rsplit("_", 1)[1].isdigit()}
