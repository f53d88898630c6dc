"""Elastic restarts (torchrun ``--max-restarts N``): where each attempt of the worker group keeps its records.

torchrun's agent restarts the whole worker group when a worker fails while restarts remain, and gives every
worker of attempt k ``TORCHELASTIC_RESTART_COUNT=k``. Attempt 0 writes the run directory itself, exactly as a
run without restarts does; attempt k > 0 writes ``attempts/<k>/``, a run directory of its own (a copy of the
manifest with ``"attempt": k``, ``ranks/``, ``control/``), made by the first of its ranks to start. So the
rank side, the live reader and the analysis work on one attempt as they work on a run, and every run
directory written before restarts were known reads as before. Stdlib only (both sides use it).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

from . import schema

RESTART_ENV = "TORCHELASTIC_RESTART_COUNT"  # set by torchrun's agent in every worker (0 on the first attempt)


def restart_count(env: Mapping[str, str]) -> int:
    """The attempt this worker belongs to (torchrun's restart count), 0 when unset or unreadable."""
    try:
        return max(0, int(env.get(RESTART_ENV) or 0))
    except ValueError:
        return 0


def max_restarts(torchrun_args: Sequence[str] | None) -> int:
    """``--max-restarts N`` (or ``--max_restarts``, ``=N``) among torchrun's arguments; 0 when absent."""
    args = list(torchrun_args or ())
    for i, a in enumerate(args):
        for name in ("--max-restarts", "--max_restarts"):
            value = (
                a[len(name) + 1 :]
                if a.startswith(name + "=")
                else (args[i + 1] if a == name and i + 1 < len(args) else None)
            )
            if value is not None:
                try:
                    return max(0, int(value))
                except ValueError:
                    return 0
    return 0


def attempt_dir(run_dir: str, k: int) -> str:
    """The directory that holds attempt ``k``'s records: the run directory for 0, else ``attempts/<k>``."""
    return run_dir if k <= 0 else os.path.join(run_dir, schema.ATTEMPTS_DIR, str(k))


def indices(run_dir: str) -> list[int]:
    """The attempts after the first that have begun (their manifest is written), in order."""
    try:
        names = os.listdir(os.path.join(run_dir, schema.ATTEMPTS_DIR))
    except OSError:
        return []
    return sorted(
        int(n)
        for n in names
        if n.isdigit() and int(n) > 0 and os.path.isfile(os.path.join(attempt_dir(run_dir, int(n)), schema.MANIFEST))
    )


def begun(run_dir: str, k: int) -> bool:
    """Has attempt ``k`` begun (its manifest is there)? One stat: the monitor asks on every poll."""
    return os.path.isfile(os.path.join(attempt_dir(run_dir, k), schema.MANIFEST))


def make(run_dir: str, manifest: Mapping[str, Any], k: int) -> tuple[str, dict[str, Any]]:
    """Attempt ``k``'s directory (created 0700 if it is not there yet) and its manifest. Several local ranks
    of the attempt start at once: the folders are made with ``exist_ok``, the manifest is written to a file
    of this process's own and linked into place, so the first one wins and no rank reads a partial file; the
    manifest comes last, so a reader that sees it (the monitor) sees the folders too."""
    d = attempt_dir(run_dir, k)
    for sub in ("", schema.RANKS_DIR, schema.CONTROL_DIR):
        path = os.path.join(d, sub) if sub else d
        os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(os.path.join(run_dir, schema.ATTEMPTS_DIR), 0o700)
    os.chmod(d, 0o700)
    target = os.path.join(d, schema.MANIFEST)
    if not os.path.exists(target):
        mine = {**manifest, "attempt": k, "attempt_created": time.time()}
        # a name of this writer's own (mkstemp, 0600): two writers never share the file they link from
        fd, tmp = tempfile.mkstemp(dir=d, prefix=f"{schema.MANIFEST}.tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(mine, f, indent=1, default=str)
        try:
            os.link(tmp, target)
        except FileExistsError:
            pass  # another rank of this attempt was first: its manifest is the same but for the time
        finally:
            os.unlink(tmp)
    with open(target, encoding="utf-8") as f:
        return d, json.load(f)
