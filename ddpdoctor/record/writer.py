"""Append-only JSON-lines writer: one ``os.write`` per line so a killed writer leaves at most one
truncated last line, and two threads never interleave inside a line."""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from .schema import VERSION


def line(kind: str, rank: int | None, **fields: Any) -> bytes:
    """Serialise one self-describing record."""
    rec = {"v": VERSION, "kind": kind, "rank": rank, "t": fields.pop("t", None) or time.time()}
    rec.update(fields)
    return (json.dumps(rec, separators=(",", ":"), default=str) + "\n").encode()


class JsonlWriter:
    """Appends records to one file. Opened lazily; never raises into the caller's thread."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def write(self, kind: str, rank: int | None, **fields: Any) -> None:
        """Append one record of ``kind`` (``v``, ``kind``, ``rank``, ``t`` and ``fields``)."""
        self.write_bytes(line(kind, rank, **fields))

    def write_bytes(self, data: bytes) -> None:
        """Append ``data`` (whole lines) with one ``os.write``; errors are swallowed."""
        try:
            if self._fd is None:
                os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.write(self._fd, data)
        except OSError:
            pass  # a full or vanished disk must not take the user's training down

    def close(self) -> None:
        """Close the file (a later write opens it again)."""
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None


def prev_path(path: str) -> str:
    """The previous segment of a ring file: ``ledger.jsonl`` -> ``ledger.prev.jsonl``."""
    base, ext = os.path.splitext(path)
    return f"{base}.prev{ext}"


class RingWriter(JsonlWriter):
    """A :class:`JsonlWriter` of bounded size: after ``seg_lines`` lines the file is renamed to its
    previous segment (``<name>.prev.jsonl``, replacing the older one) and a fresh file is started, so
    between ``seg_lines`` and ``2 * seg_lines`` of the latest lines stay on disk. Each line is still one
    ``os.write``; a rotation costs a rename, a close and an open once every ``seg_lines`` lines.
    ``shared=True`` serialises every write with a lock (a writer used by several threads: the heartbeat);
    the ledger is written by the training thread alone and takes no lock."""

    def __init__(self, path: str, seg_lines: int, shared: bool = False) -> None:
        super().__init__(path)
        self.seg_lines = max(1, int(seg_lines))
        self._n = 0
        self.rotations = 0
        self._lock = threading.Lock() if shared else None
        if not shared:
            self.write_bytes = self._write   # type: ignore[method-assign]  # one call less per line

    def write_bytes(self, data: bytes) -> None:
        """Append ``data``, rotating the file first when the segment is full."""
        if self._lock is not None:
            with self._lock:
                self._write(data)
        else:
            self._write(data)

    def _write(self, data: bytes) -> None:
        if self._n >= self.seg_lines:
            try:
                os.replace(self.path, prev_path(self.path))
            except OSError:
                pass
            self.close()   # the next write opens a fresh file
            self._n = 0
            self.rotations += 1
        self._n += 1
        fd = self._fd
        if fd is None:
            JsonlWriter.write_bytes(self, data)   # opens the file
            return
        try:   # the training thread's path (the ledger): one call, not three
            os.write(fd, data)
        except OSError:
            pass


def write_json_atomic(path: str, obj: Any) -> None:
    """Write a whole JSON document via a temporary file and rename."""
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=1, default=str)
    os.replace(tmp, path)
