"""The flight record of a rank that aborts: torch's recorder dumped to ``flight.json`` on SIGABRT (issue 54).

gloo answers a collective whose sizes differ between ranks by aborting the process (an uncaught
``gloo::EnforceNotMet`` on its transport thread: ``std::terminate``, then ``abort()``), within milliseconds of the
mismatched call, before any heartbeat or stall dump has read the recorder. Without a record written at that moment
the aborted rank's calls are unknown, and an asynchronous extra call waited on later leaves its stack at the wait
(a line every rank reached). NCCL has its own dump on a watchdog timeout; gloo has none in torch 2.13 (its
``TORCH_FR_DUMP_*`` variables only name the file).

So while the script runs, SIGABRT first runs a handler of ours: it takes the GIL (a ctypes callback does:
``PyGILState_Ensure``; the thread that aborts is usually gloo's, which holds no Python state, while the main thread
waits in a collective with the GIL released), writes the recorder's entries with their frames to ``flight.json``
exactly as the stall and end dumps do (~1 ms for a full ring), then puts the previous handler back and raises the
signal again. That handler is faulthandler's (``fatal.txt``, the stack of every thread), which then ends the process
by SIGABRT as before: the rank's exit, its stack and its exit signal are what they were without us.

Bounds and limits:
- installed at the rank's start, after faulthandler (``Probe.start``), and taken off at its end (``Probe.finish``),
  before interpreter finalization: a thread that takes the GIL then is ended by CPython, which would turn the known
  abort of a finished gloo rank at exit into something else;
- a forked child (a DataLoader worker) takes it off at fork, and the handler checks its pid: a worker's abort never
  writes the rank's record;
- one dump per process: a second thread that aborts meanwhile goes straight to the previous handler;
- where the GIL never comes free (a main thread that holds it inside C code while it waits on the aborting thread)
  the handler waits with the rank, and the monitor's hang timeout ends the job as for any other hang;
- Linux with glibc only (the ``struct sigaction`` layout below); elsewhere nothing is installed and the rank keeps
  its other records. A script's own ``signal.signal(SIGABRT, ...)`` replaces ours, as it replaces faulthandler's.
"""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import sys
import threading
from typing import Any

# glibc's struct sigaction on Linux (x86-64, aarch64 and the other 64-bit ports): handler, 1024-bit mask, flags,
# restorer
_SA_SIGINFO = 0x4


class _SigAction(ctypes.Structure):
    _fields_ = [
        ("sa_handler", ctypes.c_void_p),
        ("sa_mask", ctypes.c_ulong * (1024 // (8 * ctypes.sizeof(ctypes.c_ulong)))),
        ("sa_flags", ctypes.c_int),
        ("sa_restorer", ctypes.c_void_p),
    ]


_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


class _State:
    """What one installation keeps: libc, the previous action, our callback (kept alive while installed), the
    pid it was installed in, and the dump to run."""

    def __init__(self, libc: Any, old: _SigAction, callback: Any, pid: int, dump: Any) -> None:
        self.libc = libc
        self.old = old
        self.callback = callback
        self.pid = pid
        self.dump = dump
        self.fired = threading.Lock()


_state: _State | None = None


def supported() -> bool:
    """Whether this platform's ``struct sigaction`` is the one this module knows (Linux, glibc, 64-bit)."""
    return (
        sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc" and ctypes.sizeof(ctypes.c_void_p) == 8
    )


def _on_abort(signum: int, _info: Any, _ctx: Any) -> None:
    st = _state
    if st is None:
        return
    if os.getpid() == st.pid and st.fired.acquire(blocking=False):
        try:
            st.dump()
        except BaseException:  # noqa: BLE001 - the process is ending: nothing may stop the previous handler
            pass
    # the previous action back (faulthandler's), then the signal again: blocked while this handler runs, it is
    # delivered to this thread as the handler returns
    st.libc.sigaction(signum, ctypes.byref(st.old), None)
    getattr(st.libc, "raise")(signum)


def install(dump: Any) -> bool:
    """Run ``dump()`` (no arguments; it writes the record) when the process aborts, before the handler that is in
    place now. Call after ``faulthandler.enable``. False where the platform is not supported or libc refused."""
    global _state
    if _state is not None or not supported():
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        old = _SigAction()
        if libc.sigaction(signal.SIGABRT, None, ctypes.byref(old)) != 0:
            return False
        callback = _HANDLER(_on_abort)
        new = _SigAction()
        new.sa_handler = ctypes.cast(callback, ctypes.c_void_p).value
        new.sa_flags = _SA_SIGINFO
        st = _State(libc, old, callback, os.getpid(), dump)
        _state = st
        if libc.sigaction(signal.SIGABRT, ctypes.byref(new), None) != 0:
            _state = None
            return False
    except (OSError, AttributeError, TypeError):
        _state = None
        return False
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_forget)
    return True


def uninstall() -> None:
    """Put the previous SIGABRT action back (the rank's end, before interpreter finalization)."""
    global _state
    st = _state
    if st is None or os.getpid() != st.pid:
        return
    try:
        st.libc.sigaction(signal.SIGABRT, ctypes.byref(st.old), None)
    except (OSError, AttributeError, TypeError):
        pass
    _state = None


def _forget() -> None:
    """In a forked child: the previous action back, and the parent's dump forgotten."""
    global _state
    st = _state
    _state = None
    if st is not None:
        try:
            st.libc.sigaction(signal.SIGABRT, ctypes.byref(st.old), None)
        except (OSError, AttributeError, TypeError):
            pass
