"""Read a run directory into a :class:`RunRecord`. Stdlib only; never unpickles or evaluates anything.

The same reader serves the live monitor (incrementally, :class:`RunReader`) and ``ddpdoctor analyze``
(:func:`load_run`). A truncated last line (a killed rank leaves one) is skipped; an unknown schema
version is refused with a clear message.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from . import schema
from .writer import prev_path


class RunDirError(Exception):
    """The directory is not a ddpdoctor run directory we can read."""


@dataclass
class RankRecord:
    rank: int
    events: list[dict[str, Any]] = field(default_factory=list)
    last_hb: dict[str, Any] | None = None
    n_hb: int = 0
    seq_changed_t: float | None = None   # when this rank's collective sequence numbers last moved
    progress_t: float | None = None   # when it last showed progress: a step, a collective, a new line, CPU time
    ledger: list[dict[str, Any]] = field(default_factory=list)   # the latest collectives (bounded)
    ledger_trimmed: bool = False   # older collectives were rotated away (ring) or dropped from memory
    stacks: dict[str, Any] | None = None  # the latest dump
    checks: list[dict[str, Any]] = field(default_factory=list)
    fingerprints: list[dict[str, Any]] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None
    stderr_tail: str = ""
    counters: dict[str, Any] = field(default_factory=dict)
    terminated: str = ""   # faulthandler's dump when the rank was sent SIGTERM (where it was)
    fatal: str = ""   # faulthandler's dump when the rank died of a fatal signal (SIGABRT, SIGSEGV)

    def event(self, kind: str) -> dict[str, Any] | None:
        for e in reversed(self.events):
            if e.get("kind") == kind:
                return e
        return None

    @property
    def pid(self) -> int | None:
        e = self.event(schema.K_START)
        return e.get("pid") if e else None


@dataclass
class RunRecord:
    run_dir: str
    manifest: dict[str, Any]
    ranks: dict[int, RankRecord]
    monitor: list[dict[str, Any]]
    launcher: list[dict[str, Any]] = field(default_factory=list)  # the spawning parent (mp.spawn mode)

    def monitor_event(self, kind: str) -> dict[str, Any] | None:
        for e in reversed(self.monitor):
            if e.get("kind") == kind:
                return e
        return None

    @property
    def world_size(self) -> int | None:
        sizes = [int(e["world_size"]) for r in self.ranks.values()
                 if (e := r.event(schema.K_INIT)) and e.get("world_size") is not None]
        return max(sizes) if sizes else None

    def latest_t(self) -> float:
        ts = [e.get("t", 0.0) for e in self.monitor]
        for r in self.ranks.values():
            ts += [e.get("t", 0.0) for e in r.events]
            if r.last_hb:
                ts.append(r.last_hb.get("t", 0.0))
        return max(ts) if ts else 0.0


def read_manifest(run_dir: str) -> dict[str, Any]:
    path = os.path.join(run_dir, schema.MANIFEST)
    if not os.path.isdir(run_dir):
        raise RunDirError(f"{run_dir}: no such run directory")
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise RunDirError(f"{run_dir}: not a ddpdoctor run directory (no {schema.MANIFEST})") from None
    except (OSError, ValueError) as e:
        raise RunDirError(f"{path}: unreadable or truncated manifest ({e.__class__.__name__})") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != schema.SCHEMA:
        raise RunDirError(f"{path}: not a ddpdoctor run manifest")
    if manifest.get("version") != schema.VERSION:
        raise RunDirError(
            f"{path}: run format version {manifest.get('version')!r}, this ddpdoctor reads version "
            f"{schema.VERSION}; use the ddpdoctor release that wrote it"
        )
    return manifest


class _Tail:
    """Incremental reader of one JSON-lines file. ``ring=True``: the file may be rotated by a
    :class:`~ddpdoctor.record.writer.RingWriter` (renamed to ``<name>.prev.jsonl``): the first read takes
    the previous segment then the current file; a later read that finds a new file finishes the old one
    (now the previous segment, recognised by its inode) first. A segment rotated away unread is skipped."""

    def __init__(self, path: str, ring: bool = False, fast: bool = False) -> None:
        self.path = path
        self.fast = fast   # ledger lines: parse the rank side's own layouts without json (see _fast_ledger)
        self.offset = 0
        self.partial = b""
        self.ring = ring
        self.ino: int | None = None
        self.head = b""   # the first bytes of the file being read (ring)
        self.skipped = False   # lines were rotated away before this reader saw them

    def new_records(self) -> list[dict[str, Any]]:
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
                            self.skipped = True   # rotated at least once before this reader's first look
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
        fast = _fast_ledger if self.fast else None
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


# Ledger lines come by the thousand per rank and differ only in their times and positions: the parts that
# repeat (op, group, shapes, dtypes, call site) are decoded once and shared. A line of any other layout
# (an error, an older run) goes to json.loads.
_COLL_HEAD = b'{"v":1,"kind":"coll","rank":'
_CEND_HEAD = b'{"v":1,"kind":"cend","rank":'
_ISSUED = b',"st":"issued"}'
_coll_parts: dict[bytes, dict[str, Any]] = {}
_cend_parts: dict[bytes, dict[str, Any]] = {}


def _fast_ledger(raw: bytes) -> dict[str, Any] | None:
    try:
        if raw.startswith(_COLL_HEAD) and raw.endswith(_ISSUED):
            i = raw.index(b',"t":', 28)
            j = raw.index(b',"op":', i)
            k = raw.index(b',"seq":[', j)
            m = raw.index(b"]", k)
            n = raw.find(b',"t0":', m)   # older runs repeat the time as "t0"
            if n < 0:
                n = len(raw) - len(_ISSUED)
            key = raw[j:k] + raw[m + 1:n]
            parts = _coll_parts.get(key)
            if parts is None:
                parts = json.loads(b"{" + key[1:] + b"}")
                if len(_coll_parts) < 100000:
                    _coll_parts[key] = parts
            a, b = raw[k + 8:m].split(b",")
            t = float(raw[i + 5:j])
            e = {"v": 1, "kind": "coll", "rank": int(raw[28:i]), "t": t}
            e.update(parts)
            e["seq"] = [int(a), int(b)]
            e["t0"] = t
            e["st"] = "issued"
            return e
        if raw.startswith(_CEND_HEAD) and raw.endswith(b"}"):
            i = raw.index(b',"t":', 28)
            j = raw.index(b',"group":', i)
            k = raw.index(b',"s0":', j)
            m = raw.index(b',"s1":', k)
            n = raw.index(b',"async":', m)
            key = raw[j:k] + raw[n:]
            parts = _cend_parts.get(key)
            if parts is None:
                parts = json.loads(b"{" + key[1:])
                if len(_cend_parts) < 100000:
                    _cend_parts[key] = parts
            s1 = raw[m + 6:n]
            e = {"v": 1, "kind": "cend", "rank": int(raw[28:i]), "t": float(raw[i + 5:j]), "s0": int(raw[k + 6:m]),
                 "s1": None if s1 == b"null" else int(s1)}
            e.update(parts)
            return e
    except ValueError:
        return None
    return None


class RunReader:
    """Reads a run directory incrementally: call :meth:`refresh` as often as you like."""

    def __init__(self, run_dir: str, share: dict[tuple, list[dict[str, Any]]] | None = None) -> None:
        self.run_dir = run_dir
        # one-shot reading (analyze): ranks whose ledgers are the same but for times share their entries
        self.share = share
        self.manifest = read_manifest(run_dir)
        self._tails: dict[str, _Tail] = {}
        self._ranks: dict[int, RankRecord] = {}
        self._monitor: list[dict[str, Any]] = []
        self._launcher: list[dict[str, Any]] = []
        # the ledger kept in memory: twice the ring on disk (the rank's ring size may come from its env)
        ring = self.manifest.get("ledger_ring")
        self.ledger_cap = 2 * max(schema.LEDGER_RING, int(ring) if isinstance(ring, int) else 0)
        self._open: dict[int, dict[tuple, dict[str, Any]]] = {}   # rank -> issued collectives awaiting cend

    def _tail(self, path: str, ring: bool = False, fast: bool = False) -> _Tail:
        t = self._tails.get(path)
        if t is None:
            t = self._tails[path] = _Tail(path, ring, fast)
        return t

    def refresh(self, full: bool = True) -> RunRecord:
        """Read what was appended since the last call. ``full=False`` skips the ledgers, check records
        and fingerprints (the monitor's cheap poll); a later full refresh catches up on them."""
        self._monitor += self._tail(os.path.join(self.run_dir, schema.MONITOR)).new_records()
        self._launcher += self._tail(os.path.join(self.run_dir, schema.LAUNCHER)).new_records()
        ranks_dir = os.path.join(self.run_dir, schema.RANKS_DIR)
        try:
            names = os.listdir(ranks_dir)
        except OSError:
            names = []
        for name in names:
            if not name.isdigit():
                continue
            r = int(name)
            rec = self._ranks.get(r) or self._ranks.setdefault(r, RankRecord(rank=r))
            d = os.path.join(ranks_dir, name)
            rec.events += self._tail(os.path.join(d, schema.EVENTS)).new_records()
            for hb in self._tail(os.path.join(d, schema.HEARTBEAT), ring=True).new_records():
                prev = rec.last_hb
                if prev is None or prev.get("seq") != hb.get("seq"):
                    rec.seq_changed_t = hb.get("t")
                if prev is None or _progressed(prev, hb):
                    rec.progress_t = hb.get("t")
                rec.last_hb = hb
                rec.n_hb += 1
            if full:
                lp = os.path.join(d, schema.LEDGER)
                if self.share is not None and lp not in self._tails:
                    rec.ledger, rec.ledger_trimmed = _read_ledger_shared(lp, self.share)
                else:
                    lt = self._tail(lp, ring=True, fast=True)
                    _fold_ledger(rec.ledger, lt.new_records(), self._open.setdefault(r, {}))
                    rec.ledger_trimmed = rec.ledger_trimmed or lt.skipped
                if len(rec.ledger) > self.ledger_cap:
                    del rec.ledger[:len(rec.ledger) - self.ledger_cap // 2]
                    rec.ledger_trimmed = True
                rec.checks += self._tail(os.path.join(d, schema.CHECKS)).new_records()
                rec.fingerprints += self._tail(os.path.join(d, schema.FINGERPRINTS)).new_records()
                rec.memory += self._tail(os.path.join(d, schema.MEMORY)).new_records()
                rec.timeline += self._tail(os.path.join(d, schema.TIMELINE)).new_records()
            dumps = self._tail(os.path.join(d, schema.STACKS)).new_records()
            if dumps:
                rec.stacks = dumps[-1]
            try:
                with open(os.path.join(d, schema.COUNTERS), encoding="utf-8") as f:
                    c = json.load(f)
                rec.counters = c if isinstance(c, dict) else {}
            except (OSError, ValueError):
                pass
            if not rec.terminated and full:
                try:
                    with open(os.path.join(d, schema.TERMINATED), encoding="utf-8", errors="replace") as f:
                        rec.terminated = f.read(65536)
                except OSError:
                    pass
            if not rec.fatal:
                try:
                    with open(os.path.join(d, schema.FATAL), encoding="utf-8", errors="replace") as f:
                        rec.fatal = f.read(65536)
                except OSError:
                    pass
            if rec.error is None:
                try:
                    with open(os.path.join(d, schema.ERROR), encoding="utf-8") as f:
                        err = json.load(f)
                    rec.error = err if isinstance(err, dict) else None
                except (OSError, ValueError):
                    pass
        return RunRecord(self.run_dir, self.manifest, dict(sorted(self._ranks.items())), list(self._monitor),
                         list(self._launcher))

    def attach_logs(self, record: RunRecord) -> None:
        """Fill each rank's stderr tail from torchrun's --log-dir files (post-mortem only)."""
        logs = os.path.join(self.run_dir, schema.LOGS_DIR)
        for root, _dirs, files in os.walk(logs):
            if "stderr.log" not in files:
                continue
            local = os.path.basename(root)
            if not local.isdigit():
                continue
            rank = _global_rank(record, int(local), root)
            if rank in record.ranks:
                try:
                    with open(os.path.join(root, "stderr.log"), "rb") as f:
                        f.seek(0, os.SEEK_END)
                        f.seek(max(0, f.tell() - 16384))
                        record.ranks[rank].stderr_tail += f.read().decode("utf-8", "replace")
                except OSError:
                    pass


# a rank blocked in C++ (a collective, Work.wait(), a sync point) burns almost no CPU; one that computes
# inside a single long line of the user's code does
_BUSY_CPU = 0.03  # CPU seconds per wall second that count as progress (16 ranks on 2 cores get 0.12)


def _progressed(prev: dict[str, Any], hb: dict[str, Any]) -> bool:
    if any(prev.get(k) != hb.get(k) for k in ("seq", "step", "ncoll", "where", "pending", "awaiting")):
        return True
    dt = float(hb.get("t") or 0) - float(prev.get("t") or 0)
    cpu0, cpu1 = prev.get("cpu"), hb.get("cpu")
    if cpu0 is None or cpu1 is None:
        return False
    return dt > 0 and (float(cpu1) - float(cpu0)) / dt > _BUSY_CPU


def _fold_ledger(ledger: list[dict[str, Any]], lines: list[dict[str, Any]],
                 open_: dict[tuple, dict[str, Any]] | None = None) -> None:
    """A collective is written when issued ("st": "issued", its position predicted) and ended by a
    ``cend`` line (its real range, or the error it raised). Entries without "st" (older runs) are done.
    ``open_`` indexes the issued entries awaiting their end by (group, s0) (kept across calls by the
    incremental reader; at most 64, the oldest dropped); a ``cend`` whose ``coll`` was rotated away is
    dropped."""
    if open_ is None:
        open_ = {}
    end = schema.K_COLL_END
    for e in lines:
        if e.get("kind") != end:
            if "t0" not in e:
                e["t0"] = e.get("t")
            ledger.append(e)
            rng = e.get("seq")
            if e.get("st") == "issued" and rng:
                open_[(e.get("group"), rng[0])] = e
                if len(open_) > 64:
                    del open_[next(iter(open_))]
            continue
        c = open_.pop((e.get("group"), e.get("s0")), None)
        if c is None:
            continue
        if e.get("s1") is not None:
            c["seq"] = [c["seq"][0], int(e["s1"])]
        c["t1"] = e.get("t")
        c["err"] = e.get("err")
        c["st"] = "error" if e.get("err") else ("async" if e.get("async") else "done")


# what differs between the ledgers of ranks that made the same collectives: the rank and the times
_VOLATILE = re.compile(rb'"rank":-?\d+,"t":[-+.\deE]+|"t0":[-+.\deE]+|"t1":[-+.\deE]+')


def _read_ledger_shared(path: str, share: dict[tuple, list[dict[str, Any]]]) -> tuple[list[dict[str, Any]], bool]:
    """A rank's whole ledger ring (previous segment, then the current one), folded. At scale most ranks
    made the same collectives from the same lines: a ledger equal to one already read but for the rank
    and the times shares that one's entries (their ``rank`` and times are the first such rank's), which
    keeps ``analyze`` of thousands of ranks linear in the distinct ledgers, not in all lines."""
    chunks = []
    trimmed = False
    for p in (prev_path(path), path):
        try:
            with open(p, "rb") as f:
                chunks.append(f.read())
            if p != path:
                trimmed = True   # rotated at least once: older collectives may be gone
        except OSError:
            pass
    data = b"".join(chunks)
    cut = data.rfind(b"\n") + 1
    data = data[:cut]   # a line cut by a kill stays out (as the incremental reader skips it)
    stripped = _VOLATILE.sub(b"", data)
    key = (len(stripped), hash(stripped), trimmed)
    got = share.get(key)
    if got is not None:
        return list(got), trimmed
    t = _Tail(path, fast=True)
    ledger: list[dict[str, Any]] = []
    _fold_ledger(ledger, t._parse(data), {})
    share[key] = ledger
    return list(ledger), trimmed


def _global_rank(record: RunRecord, local_rank: int, _path: str) -> int:
    for r in record.ranks.values():
        e = r.event(schema.K_START)
        if e and e.get("local_rank") == local_rank:
            return r.rank
    return local_rank


def load_run(run_dir: str, share: dict[tuple, list[dict[str, Any]]] | None = None) -> RunRecord:
    """Load a whole run directory (``ddpdoctor analyze``)."""
    reader = RunReader(run_dir, {} if share is None else share)
    record = reader.refresh()
    reader.attach_logs(record)
    return record


def load_runs(run_dirs: list[str]) -> RunRecord:
    """Load the run directories of one job's nodes (each node's ddpdoctor keeps its own ranks) as one
    record: ranks are global, so they merge; the first directory's manifest speaks for the job."""
    share: dict[tuple, list[dict[str, Any]]] = {}
    records = [load_run(d, share) for d in run_dirs]
    if len(records) == 1:
        return records[0]
    first = records[0]
    ranks: dict[int, RankRecord] = {}
    for rec in records:
        for r, rr in rec.ranks.items():
            if r in ranks:
                raise RunDirError(f"rank {r} appears in {rec.run_dir} and in another run directory: "
                                  "give each node's run directory of one job once")
            ranks[r] = rr
    monitor = sorted((e for rec in records for e in rec.monitor), key=lambda e: e.get("t", 0.0))
    return RunRecord(first.run_dir, first.manifest, dict(sorted(ranks.items())), monitor,
                     [e for rec in records for e in rec.launcher])
