"""Append-only JSON-lines writer: one ``os.write`` per line so a killed writer leaves at most one
truncated last line, and two threads never interleave inside a line."""

from __future__ import annotations

import json
import os
import threading
import time
import weakref
from typing import Any

from .schema import LINE_VERSION


def line(kind: str, rank: int | None, **fields: Any) -> bytes:
    """Serialise one self-describing record."""
    rec = {"v": LINE_VERSION, "kind": kind, "rank": rank, "t": fields.pop("t", None) or time.time()}
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
            self.write_bytes = self._write  # type: ignore[method-assign]  # one call less per line

    def write_bytes(self, data: bytes) -> None:
        """Append ``data``, rotating the file first when the segment is full."""
        if self._lock is not None:
            with self._lock:
                self._write(data)
        else:
            self._write(data)

    def append_bytes(self, data: bytes) -> None:
        """Append ``data`` to the current segment, not counted as a line of the ring (the end line of the
        collective just written stays in its segment: the ring counts collectives)."""
        if self._lock is not None:
            with self._lock:
                JsonlWriter.write_bytes(self, data)
        else:
            JsonlWriter.write_bytes(self, data)

    def _write(self, data: bytes) -> None:
        if self._n >= self.seg_lines:
            try:
                os.replace(self.path, prev_path(self.path))
            except OSError:
                pass
            self.close()  # the next write opens a fresh file
            self._n = 0
            self.rotations += 1
        self._n += 1
        fd = self._fd
        if fd is None:
            JsonlWriter.write_bytes(self, data)  # opens the file
            return
        try:  # the training thread's path (the ledger): one call, not three
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


def _discard(*_a: Any, **_k: Any) -> None:
    return None


def _in_forked_child() -> None:
    """A forked child (a DataLoader worker) shares the parent's map and file: it must never write into
    them, nor trim the file at exit. Its lines are not the rank's: they are dropped."""
    for w in list(_mapped_writers):
        w._mm, w._fd, w._mapped = None, None, False
        w.write_bytes = w.append_bytes = w.write = w.close = _discard  # type: ignore[method-assign,assignment]


_mapped_writers: weakref.WeakSet[MappedRingWriter] = weakref.WeakSet()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_forked_child)


class MappedRingWriter(RingWriter):
    """A :class:`RingWriter` for one thread's hot path (the collective ledger): a line is copied into a
    shared memory map of the file, not written with a system call (a few microseconds less per line, more
    on a cold cache). The map's pages are the page cache's, so a rank that aborts or is killed a moment
    later keeps every line it copied, as with ``os.write``. The file grows by ``chunk`` bytes at a time,
    allocated on disk before they are mapped (``posix_fallocate``: a full disk is met there, as an error,
    never as a SIGBUS in the training thread); the unwritten rest of the last chunk reads as NUL bytes,
    which the readers take as the end of the file (:class:`~ddpdoctor.record.tails.Tail`), and ``close``
    and each rotation trim. Whatever fails to map falls back to plain appends for good."""

    def __init__(self, path: str, seg_lines: int, chunk: int = 1 << 16) -> None:
        super().__init__(path, seg_lines)
        import mmap

        self._mmap = mmap.mmap
        self.chunk = max(mmap.PAGESIZE, chunk - chunk % mmap.PAGESIZE)
        self._page = mmap.PAGESIZE
        self._mm: Any = None
        self._base = 0  # the file offset of the mapped chunk
        self._pos = 0  # the write position within it
        self._mapped = True
        self.write_bytes = self._write  # type: ignore[method-assign]
        _mapped_writers.add(self)

    def _open(self) -> None:
        """Open the file and map the chunk where its data ends (a file there already, from an earlier
        process of this rank, is continued after its last byte that is not NUL)."""
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        self._fd = fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        end = 0
        size = os.fstat(fd).st_size
        while end < size:
            block = os.pread(fd, 1 << 20, end)
            if not block:
                break
            z = block.find(b"\0")
            if z >= 0:
                end += z
                break
            end += len(block)
        self._base, self._pos = end - end % self._page, end % self._page  # the data's end, mapped or not
        self._map(self._base, self._pos)

    def _map(self, base: int, pos: int = 0) -> None:
        fd = self._fd
        if fd is None:
            raise OSError("not open")
        os.posix_fallocate(fd, base, self.chunk)
        self._mm = self._mmap(fd, self.chunk, offset=base)
        self._base, self._pos = base, pos

    def _next_chunk(self) -> bool:
        """Map the chunk after the current one (or the first); False: plain appends from now on."""
        try:
            if self._fd is None:
                self._open()
            else:
                base = self._base + self.chunk
                self._unmap()
                self._map(base)
            return True
        except (OSError, ValueError, AttributeError):
            self._fall_back()
            return False

    def _fall_back(self) -> None:
        self._trim()
        self._mapped = False
        if self._fd is not None:
            try:
                os.lseek(self._fd, 0, os.SEEK_END)
            except OSError:
                pass

    def _unmap(self) -> None:
        if self._mm is not None:
            try:
                self._mm.close()
            except (OSError, ValueError):
                pass
            self._mm = None

    def _trim(self) -> None:
        """Unmap, and cut the file after the bytes written (no NUL tail, nor a chunk allocated and not
        mapped)."""
        end = self._base + self._pos
        self._unmap()
        if self._mapped and self._fd is not None:
            try:
                os.ftruncate(self._fd, end)
            except OSError:
                pass

    def append_bytes(self, data: bytes) -> None:
        """Copy ``data`` into the current segment, not counted (see :meth:`RingWriter.append_bytes`)."""
        self._write(data, False)

    def _plain(self, data: bytes, count: bool) -> None:
        """A plain append (not mapped, or mapping failed): counted as a ring line or not."""
        if count:
            RingWriter._write(self, data)
        else:
            JsonlWriter.write_bytes(self, data)

    def _write(self, data: bytes, count: bool = True) -> None:
        if not self._mapped:
            self._plain(data, count)
            return
        if count and self._n >= self.seg_lines:
            self._trim()
            try:
                os.replace(self.path, prev_path(self.path))
            except OSError:
                pass
            JsonlWriter.close(self)
            self._n = 0
            self.rotations += 1
        if self._mm is None and not self._next_chunk():
            self._plain(data, count)
            return
        if count:
            self._n += 1
        pos, n = self._pos, len(data)
        if n <= self.chunk - pos:
            try:
                self._mm[pos : pos + n] = data
            except (ValueError, TypeError, IndexError):  # never into the training thread
                self._fall_back()
                JsonlWriter.write_bytes(self, data)  # counted above already
                return
            self._pos = pos + n
            return
        self._span(data)

    def _span(self, data: bytes) -> None:
        pos = self._pos
        room = self.chunk - pos
        # the line spans the end of the chunk: its head here, the rest at the start of the next
        self._mm[pos:] = data[:room]
        self._pos = self.chunk
        rest = data[room:]
        if len(rest) > self.chunk or not self._next_chunk():
            if self._mapped:
                self._fall_back()
            try:
                if self._fd is not None:
                    os.write(self._fd, rest)
            except OSError:
                pass
            return
        self._mm[: len(rest)] = rest
        self._pos = len(rest)

    def close(self) -> None:
        """Trim and close (a later line opens the file again and continues it)."""
        self._trim()
        JsonlWriter.close(self)
        self._base = self._pos = 0
