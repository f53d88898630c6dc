"""Stack dumps of running rank processes with py-spy, in parallel, each bounded by a timeout.

``py-spy dump --nonblocking`` reads a process's Python stacks without pausing it (about 10 ms a rank);
``--native`` pauses the process while it unwinds (about 1 s) and is only asked of ranks that did not move
between two Python dumps, so a healthy job is never stopped. Nothing here changes the job's state.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ddpdoctor.errors import DdpdoctorError, ExitCode

PTRACE_HELP = (
    "py-spy needs ptrace: run ddpdoctor as the job's user (or root); in a container start it with "
    "`--cap-add SYS_PTRACE`; on a host with Yama, `sudo sysctl kernel.yama.ptrace_scope=0` "
    "(or run as root)"
)
# native frames worth keeping: the wait inside gloo/NCCL/c10d/CUDA that a Python stack cannot show
_NATIVE_KEEP = re.compile(r"c10d|gloo|nccl|ProcessGroup|Work::wait|cuda|Synchronize", re.I)


@dataclass
class Dump:
    pid: int
    threads: list[dict[str, Any]] | None  # None: the dump failed
    error: str = ""
    gone: bool = False


def py_spy() -> str:
    """The py-spy executable: next to this Python, else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    exe = here if os.access(here, os.X_OK) else shutil.which("py-spy")
    if not exe:
        raise DdpdoctorError(
            "py-spy not found (next to this Python or on PATH): `pip install py-spy`", ExitCode.NOT_RUN
        )
    return exe


def _threads(raw: Any, native: bool) -> list[dict[str, Any]]:
    """py-spy's JSON (innermost frame first) -> ddpdoctor's shape: outermost first, [file, line, func]."""
    out = []
    for t in raw if isinstance(raw, list) else []:
        frames = t.get("frames") or []
        py = [
            [str(f.get("filename")), int(f.get("line") or 0), str(f.get("name"))]
            for f in frames
            if not native or f.get("module") is None and f.get("line")
        ]
        th: dict[str, Any] = {
            "ident": t.get("thread_id"),
            "os_tid": t.get("os_thread_id"),
            "name": t.get("thread_name") or "?",
            "main": t.get("thread_name") == "MainThread",
            "active": bool(t.get("active")),
            "stack": list(reversed(py)),
        }
        if native:
            th["native"] = [
                str(f.get("name"))[:160]
                for f in frames
                if f.get("module") is not None and _NATIVE_KEEP.search(str(f.get("name")))
            ][:8]
        out.append(th)
    if out and not any(t["main"] for t in out):
        out[0]["main"] = True
    return out


def dump_one(exe: str, pid: int, timeout: float, native: bool = False) -> Dump:
    argv = [exe, "dump", "--pid", str(pid), "--json"] + (["--native"] if native else ["--nonblocking"])
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Dump(pid, None, f"py-spy took over {timeout:g} s")
    except OSError as e:
        return Dump(pid, None, f"cannot run py-spy: {e.strerror or e}")
    if cp.returncode == 0:
        try:
            return Dump(pid, _threads(json.loads(cp.stdout), native))
        except (ValueError, TypeError, AttributeError):
            return Dump(pid, None, "py-spy gave output that is not JSON")
    err = (cp.stderr or "").strip()
    first = next((ln for ln in err.splitlines() if ln.strip()), "py-spy failed")
    if re.search(r"Permission denied|Operation not permitted|EPERM|ptrace", err, re.I):
        return Dump(pid, None, "ptrace refused: " + first[:200])
    gone = "No such file" in err or "No such process" in err or "is not running" in err or not _alive(pid)
    return Dump(pid, None, first[:200], gone=gone)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def dump_all(exe: str, pids: list[int], timeout: float, native: bool = False) -> dict[int, Dump]:
    if not pids:
        return {}
    with ThreadPoolExecutor(max_workers=min(32, len(pids))) as ex:
        return dict(zip(pids, ex.map(lambda p: dump_one(exe, p, timeout, native), pids)))


def refused(dumps: dict[int, Dump]) -> bool:
    return any(d.error.startswith("ptrace refused") for d in dumps.values())
