"""Incremental readers of the run directory's JSON-lines files (plain and ring-rotated). Stdlib only.

A truncated last line (a killed rank leaves one) is held back until its end arrives, or skipped. A NUL
byte ends a file's data: a memory-mapped writer (the ledger, ``MappedRingWriter``) leaves the unwritten
rest of its last chunk as NULs until it trims the file.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable

from .writer import prev_path


class Tail:
    """Incremental reader of one JSON-lines file. ``ring=True``: the file may be rotated by a
    :class:`~ddpdoctor.record.writer.RingWriter` (renamed to ``<name>.prev.jsonl``): the first read takes
    the previous segment then the current file; a later read that finds a new file finishes the old one
    (now the previous segment, recognised by its inode) first. A segment rotated away unread is skipped."""

    def __init__(
        self, path: str, ring: bool = False, fast: Callable[[bytes], dict[str, Any] | None] | None = None
    ) -> None:
        self.path = path
        # a parser of the rank side's own layouts (ledger lines, :func:`~ddpdoctor.record.ledger.fast_ledger`):
        # a line it returns None for goes to json.loads
        self.fast = fast
        self.offset = 0
        self.partial = b""
        self.ring = ring
        self.ino: int | None = None
        self.head = b""  # the first bytes of the file being read (ring)
        self.skipped = False  # lines were rotated away before this reader saw them

    def new_records(self) -> list[dict[str, Any]]:
        """The whole lines appended since the last call (a cut last line waits for its end)."""
        if not self.ring:
            try:
                with open(self.path, "rb") as f:
                    return self._parse(self._read(f))
            except OSError:
                return []
        # a file is known by its inode and its first bytes (a deleted segment's inode is soon reused)
        try:
            f = open(self.path, "rb")
        except OSError:
            return []
        with f:
            chunks: list[bytes] = []
            if not self._same(f):
                try:
                    with open(prev_path(self.path), "rb") as pf:
                        if self.ino is None:
                            self.skipped = True  # rotated at least once before this reader's first look
                            chunks.append(self._read(pf))
                        elif self._same(pf):
                            chunks.append(self._read(pf))
                        else:
                            self.skipped = True
                except OSError:
                    if self.ino is not None:
                        self.skipped = True
                out = self._parse(b"".join(chunks))
                self.ino, self.offset, self.partial, self.head = os.fstat(f.fileno()).st_ino, 0, b"", b""
                return out + self._parse(self._read(f))
            return self._parse(self._read(f))

    def _same(self, f: Any) -> bool:
        if self.ino is None or os.fstat(f.fileno()).st_ino != self.ino:
            return False
        return not self.head or os.pread(f.fileno(), len(self.head), 0) == self.head

    def _read(self, f: Any) -> bytes:
        try:
            f.seek(self.offset)
            data = f.read()
        except OSError:
            return b""
        z = data.find(b"\0")
        if z >= 0:
            data = data[:z]  # the bytes after it are not written yet: read them from here next time
        if self.offset == 0 and data:
            self.head = data[:64]
        self.offset += len(data)
        return data

    def _parse(self, data: bytes) -> list[dict[str, Any]]:
        if not data:
            return []
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()  # b"" when the data ended with a newline
        out = []
        loads = json.loads
        fast = self.fast
        for raw in lines:
            if fast is not None:
                rec = fast(raw)
                if rec is not None:
                    out.append(rec)
                    continue
            try:
                rec = loads(raw)
            except ValueError:
                continue  # a line cut by a kill in the middle of a write
            if isinstance(rec, dict):
                out.append(rec)
        return out
