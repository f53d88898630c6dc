"""torchrun's records of a failed job: the error file each ``@record`` rank writes
(``TORCHELASTIC_ERROR_FILE``: ``{"message": {"message": ..., "extraInfo": {"py_callstack", "timestamp"}}}``,
torch/distributed/elastic/multiprocessing/errors/error_handler.py) and the failure summary torchrun's
agent prints to the job's log (``Root Cause (first observed failure):`` / ``rank : 1 (local_rank: 1)`` /
``exitcode : -9 (pid: ...)`` / ``error_file: ...`` / ``traceback : ...``). Pure: no torch.

An error file holds no rank: the rank comes from torchrun's log folder (``attempt_<n>/<local_rank>/``),
or from a failure summary that names the file.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from ddpdoctor.record.paths import LIB_MARKERS, is_user_path

MAX_BYTES = 64 << 20
_TB_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (.+)$')
_ATTEMPT = re.compile(r"attempt_(\d+)$")
# words of a collective that failed because a peer went away: the rank that wrote it is a victim
VICTIM_WORDS = (
    "Connection closed by peer",
    "remote worker crashing",
    "Connection reset by peer",
    "NCCL communicator was aborted",
    "Broken pipe",
    "ECONNRESET",
    "peer closed",
)


class ErrorFileError(ValueError):
    """A file named as an error file that is not one: the one-line reason."""


@dataclass(frozen=True)
class RankError:
    """One rank's failure: from its error file, a failure summary, or both."""

    rank: int | None  # global rank where known (summary), else the local rank of the folder
    local_rank: int | None
    attempt: int | None
    message: str  # "RuntimeError: loss is nan at step 3", or "Signal 9 (SIGKILL) ..."
    frames: tuple[tuple[str, int, str], ...]  # (file, line, function) of the traceback, outermost first
    timestamp: float | None
    exitcode: int | None = None
    path: str = ""
    root_cause: bool = False  # torchrun's "Root Cause (first observed failure)"

    @property
    def victim(self) -> bool:
        """The failure of a collective whose peer went away, not a fault of this rank."""
        return any(w in self.message for w in VICTIM_WORDS)

    def user_frame(self) -> tuple[str, int, str] | None:
        """The innermost frame of the user's code."""
        mine = [f for f in self.frames if is_user_path(f[0], lib_markers=LIB_MARKERS)]
        return mine[-1] if mine else None


def frames_of(text: str) -> tuple[tuple[str, int, str], ...]:
    """The ``File "...", line N, in f`` frames of a Python traceback text, outermost first."""
    out = []
    for line in text.splitlines():
        m = _TB_FRAME.match(line)
        if m:
            out.append((m.group(1), int(m.group(2)), m.group(3).strip()))
    return tuple(out)


def is_error_file(path: str) -> bool:
    """A JSON file whose top level has torchrun's ``message`` key (read at most 64 MiB)."""
    if os.path.basename(path) != "error.json" and not path.endswith(".json"):
        return False
    try:
        if os.path.getsize(path) > MAX_BYTES:
            return False
        with open(path, "rb") as f:
            data = json.loads(f.read())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and "message" in data and set(data) <= {"message", "errorCode"} | set(data)


def _layout(path: str) -> tuple[int | None, int | None]:
    """(attempt, local rank) from torchrun's log folder: ``.../attempt_<n>/<local_rank>/error.json``."""
    parent = os.path.dirname(os.path.abspath(path))
    local = os.path.basename(parent)
    m = _ATTEMPT.search(os.path.basename(os.path.dirname(parent)))
    if m and local.isdigit():
        return int(m.group(1)), int(local)
    return None, None


def load(path: str) -> RankError:
    """One torchrun error file. Raises ErrorFileError (one line) when it is not one."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(MAX_BYTES + 1))
    except OSError as e:
        raise ErrorFileError(f"{path}: cannot read it: {e.strerror}") from None
    except (ValueError, RecursionError) as e:
        raise ErrorFileError(f"{path}: truncated or broken JSON ({e})") from None
    msg = data.get("message") if isinstance(data, dict) else None
    extra: dict = {}
    if isinstance(msg, str):  # the "new message format": a bare string
        text = msg
    elif isinstance(msg, dict):
        text, extra = str(msg.get("message", "")), msg.get("extraInfo") or {}
    else:
        raise ErrorFileError(f"{path}: not a torchrun error file (no 'message')")
    stack = str(extra.get("py_callstack", "")) if isinstance(extra, dict) else ""
    ts = extra.get("timestamp") if isinstance(extra, dict) else None
    attempt, local = _layout(path)
    code = msg.get("errorCode") if isinstance(msg, dict) else None
    return RankError(
        local,
        local,
        attempt,
        text,
        frames_of(stack),
        float(ts) if isinstance(ts, (str, int, float)) and str(ts).isdigit() else None,
        int(code) if isinstance(code, int) else None,
        path,
    )


# -- torchrun's failure summary in a log ------------------------------------------------------------

_SUMMARY_KEY = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*)$")
_RANK_LINE = re.compile(r"(-?\d+)\s*\(local_rank:\s*(-?\d+)\)")
_EXIT = re.compile(r"(-?\d+)")


def summaries(text: str) -> list[RankError]:
    """Every failure block of torchrun's summary (``Failures:`` and ``Root Cause ...``) in a log text."""
    out: list[RankError] = []
    cur: dict[str, str] | None = None
    tb: list[str] = []
    root = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Root Cause"):
            root = True
        if re.match(r"^\[\d+\]:$", stripped) or stripped.startswith(("====", "----")):
            if cur is not None:
                out.append(_summary(cur, tb, cur.get("_root") == "1"))
            cur, tb = ({"_root": "1" if root else "0"} if re.match(r"^\[\d+\]:$", stripped) else None), []
            if stripped.startswith("===="):
                root = False  # the summary ends: a later one's Failures blocks are no root cause
            continue
        if cur is None:
            continue
        m = _SUMMARY_KEY.match(line)
        if m and "traceback" not in cur:
            cur[m.group(1)] = m.group(2).strip()
        elif "traceback" in cur:
            tb.append(line)
    if cur is not None:
        out.append(_summary(cur, tb, cur.get("_root") == "1"))
    return [e for e in out if e.rank is not None]


def _summary(block: dict[str, str], tb: list[str], root: bool) -> RankError:
    m = _RANK_LINE.search(block.get("rank", ""))
    e = _EXIT.match(block.get("exitcode", ""))
    first = block.get("traceback", "")
    body = "\n".join([first, *tb])
    lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
    message = lines[-1] if lines else ""
    ef = block.get("error_file", "")
    return RankError(
        int(m.group(1)) if m else None,
        int(m.group(2)) if m else None,
        None,
        message,
        frames_of(body),
        None,
        int(e.group(1)) if e else None,
        "" if ef in ("", "<N/A>") else ef,
        root,
    )


# -- a rank's own output: torchrun's worker logs (--log-dir .../attempt_<n>/<local_rank>/stderr.log) and the
# console, where torchrun prefixes each worker line with "[rank1]:" (and "[default1]:" under --tee) ---------

_PREFIX = re.compile(r"^(?:\[default(\d+)\]:)?(?:\[rank(\d+)\]:)?\s?")
_FAULT_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+) in (.+)$')  # faulthandler: no comma, innermost first
_FATAL = {"Aborted": -6, "Segmentation fault": -11, "Bus error": -7, "Floating-point exception": -8}


def _by_rank(text: str, rank: int | None) -> dict[int | None, list[str]]:
    out: dict[int | None, list[str]] = {}
    for line in text.splitlines():
        m = _PREFIX.match(line)
        assert m is not None  # every part of the pattern is optional
        if m.group(2) is not None:
            r: int | None = int(m.group(2))
        elif m.group(1) is not None and rank is None:
            r = int(m.group(1))  # "[default1]:" alone: the local rank's own output
        elif rank is None:
            continue  # the agent's own lines in a console log: its summary is read by summaries()
        else:
            r = rank
        out.setdefault(r, []).append(line[m.end() :])
    return out


def _python_traceback(lines: list[str]) -> tuple[str, tuple[tuple[str, int, str], ...]] | None:
    """The last Python traceback of a rank's lines: (the exception line, its frames outermost first)."""
    start = max((i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call last)")), default=-1)
    if start < 0:
        return None
    body: list[str] = []
    message = ""
    for ln in lines[start + 1 :]:
        if ln.startswith((" ", "\t")) or not ln.strip():
            body.append(ln)
            continue
        message = ln.strip()
        break
    return message, frames_of("\n".join(body))


def _fatal(lines: list[str]) -> tuple[str, int, tuple[tuple[str, int, str], ...]] | None:
    """A native crash faulthandler reported ("Fatal Python error: Aborted" and each thread's stack): the
    message (the C++ exception's what() where printed), the exit code, and the stack of the thread that was
    in torch.distributed (else the last one), outermost first."""
    at = next((i for i, ln in enumerate(lines) if ln.startswith("Fatal Python error: ")), -1)
    if at < 0:
        return None
    kind = lines[at].split(": ", 1)[1].strip()
    what = next((ln.split("what():", 1)[1].strip() for ln in lines[:at] if "what():" in ln), "")
    threads: list[list[tuple[str, int, str]]] = []
    for ln in lines[at + 1 :]:
        if "(most recent call first)" in ln:
            threads.append([])
        elif threads and (m := _FAULT_FRAME.match(ln)):
            threads[-1].append((m.group(1), int(m.group(2)), m.group(3).strip()))
    stack = next((t for t in threads if any("torch/distributed/" in f[0] for f in t)), threads[-1] if threads else [])
    message = f"Fatal Python error: {kind}" + (f": {what}" if what else "")
    return message, _FATAL.get(kind, -6), tuple(reversed(stack))


def worker_errors(text: str, path: str = "") -> list[RankError]:
    """The failures a rank's own output shows: a Python traceback, or a native crash. In a worker log
    of torchrun's log folder the rank is the folder's local rank unless the lines say ``[rankN]:``; in a
    console log only prefixed lines count (the rest is the agent's)."""
    attempt, local = _layout(path) if path else (None, None)
    out = []
    for rank, lines in sorted(_by_rank(text, local).items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
        if rank is None:
            continue
        fatal = _fatal(lines)
        if fatal is not None:
            msg, code, frames = fatal
            out.append(RankError(rank, local, attempt, msg, frames, None, code, path))
            continue
        tb = _python_traceback(lines)
        if tb is not None and tb[0]:
            out.append(RankError(rank, local, attempt, tb[0], tb[1], None, None, path))
    return out
