"""`ddpdoctor attach` takes a running NCCL rank's flight recorder, for real (skipped without a GPU): through
NCCL's own dump pipe (``TORCH_NCCL_DEBUG_INFO_PIPE_FILE``: the rank's heartbeat monitor reads the FIFO and dumps
to ``TORCH_FR_DUMP_TEMP_FILE<rank>``), and through torch's debug server (``/handler/dump_nccl_trace_pickle``).
One rank (NCCL refuses two ranks on one GPU): the dump's content, not a culprit, is what is checked here; the
culprit logic on dumps is tests/unit/postmortem/test_detect.py, tests/e2e/test_postmortem_jobs.py and tests/e2e/test_attach_fr.py."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from helpers import free_port
from userjobs import Job, attach

from ddpdoctor.postmortem import flight

SCRIPT = Path(__file__).parent / "scripts" / "nccl_idle.py"
pytestmark = pytest.mark.skipif(
    not os.access(os.path.join(os.path.dirname(sys.executable), "py-spy"), os.X_OK),
    reason="py-spy is not installed next to this Python",
)


def _idle_job(tmp: Path, env: dict[str, str]) -> Job:
    ready = tmp / "ready"
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1", str(SCRIPT)]
    job = Job(argv, tmp, {**env, "NCCL_IDLE_READY": str(ready)})
    deadline = time.time() + 180
    while not ready.exists() and time.time() < deadline and job.proc.poll() is None:
        time.sleep(0.3)
    if not ready.exists():
        job.end()
        raise AssertionError(f"the NCCL job did not get ready: {job.log.name}")
    return job


def test_attach_takes_the_nccl_flight_recorder_through_its_dump_pipe(tmp_path: Path) -> None:
    (tmp_path / "dumps").mkdir()
    earlier = tmp_path / "dumps" / "rank_0"
    earlier.write_bytes(b"an earlier dump")  # the new dump overwrites it: attach keeps a copy
    job = _idle_job(
        tmp_path,
        {
            "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(tmp_path / "fr_pipe_"),
            "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "dumps" / "rank_"),
        },
    )
    try:
        assert (tmp_path / "fr_pipe_0.pipe").exists(), "NCCL's heartbeat monitor made no pipe"
        run_dir = tmp_path / "attach-run"
        code, rep, err = attach(tmp_path, "--pid", str(job.proc.pid), "--no-native", "--run-dir", str(run_dir))
        assert code in (0, 3), err  # 3: the stacks see a rank blocked outside a collective (it sleeps)
        notes = [n for n in rep["notes"] if n.startswith("flight recorder taken from")]
        assert notes == [
            "flight recorder taken from rank 0 through NCCL's dump pipe (pickle); the dumps the job "
            "had written before are kept in fr-earlier/"
        ], notes
        d = flight.load(str(run_dir / "fr" / "rank_0"))
        assert d.fmt == "pickle" and d.stacks
        ops = [e for e in d.entries if e.op == "all_reduce" and e.backend == "nccl"]
        assert len(ops) >= 5 and all(e.state == "completed" for e in ops)
        assert (run_dir / "fr-earlier" / "rank_0").read_bytes() == b"an earlier dump"
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["attach"]["fr"]["ranks"]["0"]["how"] == "NCCL's dump pipe"
        assert job.alive(), "the dump must leave the job running"
    finally:
        job.end()


def test_attach_takes_the_nccl_flight_recorder_through_torchs_debug_server(tmp_path: Path) -> None:
    pytest.importorskip("tabulate", reason="torch's debug server (rank 0's frontend) imports tabulate")
    job = _idle_job(tmp_path, {"ATTACHJOB_DEBUG_PORT": str(free_port())})
    try:
        run_dir = tmp_path / "attach-run"
        code, rep, err = attach(tmp_path, "--pid", str(job.proc.pid), "--no-native", "--run-dir", str(run_dir))
        assert code in (0, 3), err  # 3: the stacks see a rank blocked outside a collective (it sleeps)
        notes = [n for n in rep["notes"] if n.startswith("flight recorder taken from")]
        assert notes == ["flight recorder taken from rank 0 through torch's debug server (pickle)"], notes
        d = flight.load(str(run_dir / "fr" / "rank_0"))
        assert d.fmt == "pickle" and d.stacks and any(e.backend == "nccl" for e in d.entries)
        assert job.alive()
    finally:
        job.end()
