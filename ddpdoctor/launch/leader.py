"""One ddpdoctor per node under SLURM: when a step starts more tasks than nodes (``--ntasks-per-node=2``,
one task per GPU), task 0 of each node (``SLURM_LOCALID=0``) leads: it runs torchrun, which starts every rank
of the node. The node's other tasks say so in one line, wait for the leader, and exit with its exit code.
Without this, every task would start a torchrun of its own, and they would race for the job's nodes: a
job formed by half of them, the others' torchruns crashing, and a false OK from ddpdoctors whose ranks never
ran.

The leader writes ``<tmp>/ddpdoctor-<uid>/<cluster>-<job>.<step>-<host>.leader`` (its pid and start time) before
anything else, ``.report`` (the job's JSON report) once it has one, and ``.rc`` (its exit code) as it exits;
the followers wait for the first, then for the last or for the leader's process to end, and write the report
where their own ``--json`` asks: every task of the step has the job's report. Local files: the tasks of one node share its /tmp."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping

from ddpdoctor.launch.launchers import SlurmStep, slurm_step

START_WAIT_S = 120.0  # a follower waits this long for its node's task 0 to start
POLL_S = 0.3
STALE_S = 60.0  # a leader file written this long before a follower started is not its leader's


def _base(step: SlurmStep, tmp: str | None = None) -> str:
    d = os.path.join(tmp or tempfile.gettempdir(), f"ddpdoctor-{os.getuid()}")
    os.makedirs(d, mode=0o700, exist_ok=True)
    st = os.lstat(d)
    if stat.S_ISLNK(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        # a shared /tmp: a folder of this name made by someone else (or a link) could feed a follower
        # another process's exit code; refuse it rather than trust it
        from ddpdoctor.errors import DdpdoctorError

        raise DdpdoctorError(f"{d} is not this user's private folder (0700): remove it, or set TMPDIR")

    def safe(text: str) -> str:
        return "".join(c if c.isalnum() or c in "-._" else "_" for c in text)

    # the cluster's name first: two clusters sharing this /tmp both have a job 1, step 0 on a host "n0",
    # and a follower must never wait on (and exit with the code of) the other cluster's leader
    cluster = f"{safe(step.cluster)}-" if step.cluster else ""
    return os.path.join(d, f"{cluster}{step.job}.{step.step}-{safe(step.host or 'node')}")


def _write(path: str, data: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)  # atomic: a follower never reads half a file


def _read(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        return doc if isinstance(doc, dict) else None
    except (OSError, ValueError):
        return None


def _alive(pid: int, created: float) -> bool:
    import psutil

    try:
        return abs(psutil.Process(pid).create_time() - created) < 1.0  # not a reused pid
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False


def publish_report(render: Callable[[], str], env: Mapping[str, str], tmp: str | None = None) -> None:
    """The leader of a node with other tasks: the job's JSON report, for each follower to write where its own
    ``--json`` asks (``.report`` beside ``.rc``, naming the leader's pid); ``render`` makes it, only where a
    follower may read it. Nothing outside SLURM or alone on the node."""
    step = slurm_step(env)
    if step is None or step.local_id != 0 or not step.tasks or step.tasks <= 1:
        return
    with contextlib.suppress(OSError):
        _write(_base(step, tmp) + ".report", {"pid": os.getpid(), "report": render()})


def _copy_report(base: str, pid: int, json_path: str, say: Callable[[str], None]) -> None:
    """A follower's ``--json``: the leader's report of the job (the one every task of the step shares)."""
    doc = _read(base + ".report")
    if doc is None or doc.get("pid") != pid or not isinstance(doc.get("report"), str):
        say(f"ddpdoctor: error: task 0 wrote no report of the job, so none is written to {json_path}")
        return
    if json_path == "-":
        sys.stdout.write(doc["report"])
        sys.stdout.flush()
        return
    try:
        with open(json_path, "w", encoding="utf-8") as f:
            f.write(doc["report"])
    except OSError as e:
        say(f"ddpdoctor: error: cannot write {json_path}: {e.strerror}")


def follow(
    step: SlurmStep,
    say=None,
    tmp: str | None = None,
    start_wait: float = START_WAIT_S,
    json_path: str | None = None,
) -> int:
    """A follower: wait (bounded while the leader has not started; then as long as it runs) and return the
    leader's exit code: 4 (not run) when it never started, 1 when it ended without one (killed). With
    ``json_path`` (the follower's own ``--json``), the leader's report of the job is written there."""
    say = say or (lambda text: print(text, file=sys.stderr, flush=True))
    base = _base(step, tmp)
    say(
        f"ddpdoctor: task {step.local_id} on {step.host or 'this node'} of job step {step.id} waits for task 0, "
        f"which runs this node's ranks (one ddpdoctor per node: --ntasks-per-node=1 starts no extra task)"
    )
    import psutil

    # the tasks of a step start within seconds of each other: files older than that are another step's
    # of the same ids (a cluster whose job ids started again), never this leader's
    me = psutil.Process().create_time() - STALE_S
    deadline = time.time() + start_wait
    lead = _read(base + ".leader")
    while lead is None or float(lead.get("created") or 0.0) < me:
        if time.time() > deadline:
            say(f"ddpdoctor: error: task 0 on {step.host or 'this node'} did not start within {start_wait:.0f} s")
            return 4
        time.sleep(POLL_S)
        lead = _read(base + ".leader")
    pid, created = int(lead.get("pid") or 0), float(lead.get("created") or 0.0)

    def code() -> int | None:
        rc = _read(base + ".rc")  # this leader's: it names its pid
        ok = rc is not None and rc.get("pid") == pid and isinstance(rc.get("rc"), int)
        return int(rc["rc"]) if ok and rc is not None else None

    while True:
        if (rc := code()) is not None:
            if json_path:
                _copy_report(base, pid, json_path, say)
            return rc
        if not _alive(pid, created):
            if (rc := code()) is not None:  # it may have written it just before it ended
                if json_path:
                    _copy_report(base, pid, json_path, say)
                return rc
            say(f"ddpdoctor: error: task 0 on {step.host or 'this node'} (pid {pid}) ended without an exit code")
            return 1
        time.sleep(POLL_S)


@contextlib.contextmanager
def per_node(env: Mapping[str, str], tmp: str | None = None, json_path: str | None = None) -> Iterator[None]:
    """Around a command that runs a script: a follower exits here with its leader's code (and writes the
    leader's report to its own ``json_path``); the leader records its own exit code (the ``SystemExit`` it
    leaves with) for its followers. Outside SLURM: nothing."""
    step = slurm_step(env)
    if step is None or env.get("LOCAL_RANK") or env.get("TORCHELASTIC_RUN_ID"):
        yield
        return
    if step.local_id != 0:
        sys.exit(follow(step, tmp=tmp, json_path=json_path))
    import psutil

    base = _base(step, tmp)
    for old in (".rc", ".report"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(base + old)
    _write(base + ".leader", {"pid": os.getpid(), "created": psutil.Process().create_time()})
    code: int = 5
    try:
        yield
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        raise
    except KeyboardInterrupt:
        code = 130
        raise
    finally:
        with contextlib.suppress(OSError):
            _write(base + ".rc", {"rc": code, "pid": os.getpid()})
