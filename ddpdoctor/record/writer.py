"""Append-only JSON-lines writer: one ``os.write`` per line so a killed writer leaves at most one
truncated last line, and two threads never interleave inside a line."""

from __future__ import annotations

import json
import os
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
        self.write_bytes(line(kind, rank, **fields))

    def write_bytes(self, data: bytes) -> None:
        try:
            if self._fd is None:
                os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.write(self._fd, data)
        except OSError:
            pass  # a full or vanished disk must not take the user's training down

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None


def write_json_atomic(path: str, obj: Any) -> None:
    """Write a whole JSON document via a temporary file and rename."""
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=1, default=str)
    os.replace(tmp, path)
