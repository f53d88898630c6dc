"""What both ways of starting a rank (bootstrap: torchrun's worker; spawn: an mp.spawn child) share: the
manifest, the exception record (error.json) and faulthandler's files (fatal.txt, terminated.txt)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import traceback
from collections.abc import Iterator
from typing import Any

from ddpdoctor.record import schema

_terminated: Any = None  # terminated.txt, open for the life of the process: faulthandler's SIGTERM stack


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
        global _terminated
        _terminated = t
    except (OSError, AttributeError, RuntimeError):
        pass


@contextlib.contextmanager
def sigterm_deferred() -> Iterator[None]:
    """SIGTERM held back while the rank writes the records that judge it (its final heartbeat, error.json,
    flight.json: milliseconds), then delivered as before: faulthandler's stack, then the default action.

    torchrun SIGTERMs every rank once one of them died, and a rank that raised because its peer died is
    usually writing its end just then: cut between its error.json and its flight record, its collectives
    were unknown (a fresh clone's CI read a divergence as an abnormal exit). Only the main thread can set
    a Python handler; elsewhere nothing is deferred. A script's own SIGTERM handler is put back and called
    as it would have been. A SIGTERM that lands in the few bytecodes between the block's end and the old
    handler's return is not re-raised: the rank then ends by itself, a moment later."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    try:
        prev = signal.signal(signal.SIGTERM, lambda signum, _frame: got.append(signum))
    except (ValueError, OSError):
        yield
        return
    try:
        yield
    finally:
        _restore_sigterm(prev)
        if got:
            os.kill(os.getpid(), signal.SIGTERM)


def _restore_sigterm(prev: Any) -> None:
    """The SIGTERM disposition from before ``sigterm_deferred``: the script's handler, or (where the script
    set none: SIG_DFL as Python sees it) faulthandler's registration over the default action."""
    import faulthandler

    signal.signal(signal.SIGTERM, prev)
    if prev is signal.SIG_DFL and _terminated is not None:
        try:
            # registered already, faulthandler would only swap its file: off, then on again over SIG_DFL
            faulthandler.unregister(signal.SIGTERM)
            faulthandler.register(signal.SIGTERM, file=_terminated, all_threads=True, chain=True)
        except (OSError, RuntimeError, ValueError):
            pass
