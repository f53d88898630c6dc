"""The run directory: private (0700), with a versioned manifest."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Mapping
from typing import Any

import psutil

from ddpdoctor import __version__
from ddpdoctor.errors import DdpdoctorError
from ddpdoctor.record import schema
from ddpdoctor.record.writer import write_json_atomic


def run_name(command: str, env: Mapping[str, str], stamp: str, pid: int) -> str:
    """The default run directory's name. Under SLURM it names the job step, the node and its host
    (``hang-4242.0-n1-gpu08-20260101-120000``), so that every node's directory on a shared filesystem is told
    apart; elsewhere ``hang-<time>-<pid>``."""
    from ddpdoctor.launch.launchers import slurm_step

    step = slurm_step(env)
    if step is None:
        return f"{command}-{stamp}-{pid}"
    node = "" if step.node is None else f"-n{step.node}"
    host = "".join(c if c.isalnum() or c in "-." else "_" for c in (step.host or socket.gethostname()))
    return f"{command}-{step.id}{node}-{host}-{stamp}"


def default_run_dir(command: str, env: Mapping[str, str] | None = None) -> str:
    """A new, empty run directory under ./ddpdoctor-runs, made now (``os.mkdir``: two processes never get
    the same one; a name taken already gets ``-2``, ``-3``...)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = os.path.join(
        os.getcwd(), "ddpdoctor-runs", run_name(command, os.environ if env is None else env, stamp, os.getpid())
    )
    try:
        os.makedirs(os.path.dirname(base), exist_ok=True)
    except OSError:
        return base  # create() says why, in one line
    for i in range(1, 1000):
        path = base if i == 1 else f"{base}-{i}"
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue
        except OSError:
            return path
    return base


def create(path: str, manifest_fields: dict[str, Any]) -> str:
    path = os.path.abspath(path)
    collectives = os.environ.get("DDPDOCTOR_COLLECTIVES") or schema.COLLECTIVES_MODES[0]
    if collectives not in schema.COLLECTIVES_MODES:
        raise DdpdoctorError(
            f"DDPDOCTOR_COLLECTIVES={collectives}: expected recorder (the default: torch's flight recorder) or "
            "wrappers (ddpdoctor's own ledger of every call)"
        )
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.isdir(path) and os.listdir(path):
            raise DdpdoctorError(f"run directory {path} exists and is not empty; choose a new --run-dir")
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.chmod(path, 0o700)
        for sub in (schema.RANKS_DIR, schema.CONTROL_DIR, schema.LOGS_DIR):
            os.makedirs(os.path.join(path, sub), mode=0o700, exist_ok=True)
        me = psutil.Process()
        manifest = {
            "schema": schema.SCHEMA,
            "version": schema.VERSION,
            "ddpdoctor": __version__,
            "created": time.time(),
            "host": socket.gethostname(),
            "python": sys.executable,
            "monitor_pid": me.pid,
            "monitor_create_time": me.create_time(),
            "user_env_keys": sorted(os.environ),
            "collectives": collectives,
            **manifest_fields,
        }
        write_json_atomic(os.path.join(path, schema.MANIFEST), manifest)
    except DdpdoctorError:
        raise
    except OSError as e:
        raise DdpdoctorError(f"cannot create run directory {path}: {e.strerror or e}") from None
    return path
