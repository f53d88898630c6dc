"""The run directory: private (0700), with a versioned manifest."""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any

import psutil

from ddpdoctor import __version__
from ddpdoctor.errors import DdpdoctorError
from ddpdoctor.record import schema
from ddpdoctor.record.writer import write_json_atomic


def default_run_dir(command: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join(os.getcwd(), "ddpdoctor-runs", f"{command}-{stamp}-{os.getpid()}")


def create(path: str, manifest_fields: dict[str, Any]) -> str:
    path = os.path.abspath(path)
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
            **manifest_fields,
        }
        write_json_atomic(os.path.join(path, schema.MANIFEST), manifest)
    except DdpdoctorError:
        raise
    except OSError as e:
        raise DdpdoctorError(f"cannot create run directory {path}: {e.strerror or e}") from None
    return path
