"""What both ways of starting a rank (bootstrap: torchrun's worker; spawn: an mp.spawn child) share: the
manifest, the exception record (error.json) and faulthandler's files (fatal.txt, terminated.txt)."""

from __future__ import annotations

import json
import os
import signal
import traceback
from typing import Any

from ddpdoctor.record import schema


def read_manifest(run_dir: str) -> dict[str, Any]:
    with open(os.path.join(run_dir, schema.MANIFEST), encoding="utf-8") as f:
        return json.load(f)


def error_record(exc: BaseException) -> dict[str, Any]:
    """The exception as JSON: type, message, frames (outermost first) and the user's line."""
    from ddpdoctor.rank import sites

    frames = [[fs.filename, fs.lineno, fs.name] for fs in traceback.extract_tb(exc.__traceback__)]
    user = [f for f in frames if sites.is_user_file(f[0])]
    return {
        "type": type(exc).__name__,
        "module": type(exc).__module__,
        "message": str(exc)[:4000],
        "frames": frames[-40:],
        "user_frame": user[-1] if user else None,
        "pid": os.getpid(),
    }


def enable_faulthandler(rank_dir: str) -> None:
    """Fatal signals (SIGSEGV, SIGABRT) leave the Python stack in the run directory, not on stderr."""
    import faulthandler

    try:
        # kept open for the life of the process
        f = os.fdopen(os.open(os.path.join(rank_dir, schema.FATAL), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w")
        faulthandler.enable(file=f, all_threads=True)
        # where the rank was when something ended it (torchrun, ddpdoctor): dumped at C level, so it works
        # while the main thread sits in a collective; chain=True keeps SIGTERM's effect and the script
        # still sees SIG_DFL from signal.getsignal
        t = os.fdopen(
            os.open(os.path.join(rank_dir, schema.TERMINATED), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w"
        )
        faulthandler.register(signal.SIGTERM, file=t, all_threads=True, chain=True)
    except (OSError, AttributeError, RuntimeError):
        pass
