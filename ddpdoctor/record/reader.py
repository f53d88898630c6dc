"""Read a run directory into a :class:`RunRecord`. Stdlib only; never unpickles or evaluates anything.

The same reader serves the live monitor (incrementally, :class:`RunReader`) and ``ddpdoctor analyze``
(:func:`load_run`). A truncated last line (a killed rank leaves one) is skipped; an unknown schema
version is refused with a clear message.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from . import schema


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
    ledger: list[dict[str, Any]] = field(default_factory=list)
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
    """Incremental reader of one JSON-lines file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def new_records(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        self.offset += len(data)
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()  # b"" when the data ended with a newline
        out = []
        for raw in lines:
            try:
                rec = json.loads(raw)
            except ValueError:
                continue  # a line cut by a kill in the middle of a write
            if isinstance(rec, dict):
                out.append(rec)
        return out


class RunReader:
    """Reads a run directory incrementally: call :meth:`refresh` as often as you like."""

    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir
        self.manifest = read_manifest(run_dir)
        self._tails: dict[str, _Tail] = {}
        self._ranks: dict[int, RankRecord] = {}
        self._monitor: list[dict[str, Any]] = []
        self._launcher: list[dict[str, Any]] = []

    def _tail(self, path: str) -> _Tail:
        t = self._tails.get(path)
        if t is None:
            t = self._tails[path] = _Tail(path)
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
            for hb in self._tail(os.path.join(d, schema.HEARTBEAT)).new_records():
                prev = rec.last_hb
                if prev is None or prev.get("seq") != hb.get("seq"):
                    rec.seq_changed_t = hb.get("t")
                if prev is None or _progressed(prev, hb):
                    rec.progress_t = hb.get("t")
                rec.last_hb = hb
                rec.n_hb += 1
            if full:
                _fold_ledger(rec.ledger, self._tail(os.path.join(d, schema.LEDGER)).new_records())
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
    if any(prev.get(k) != hb.get(k) for k in ("seq", "step", "ncoll", "where", "pending")):
        return True
    dt = float(hb.get("t") or 0) - float(prev.get("t") or 0)
    cpu0, cpu1 = prev.get("cpu"), hb.get("cpu")
    if cpu0 is None or cpu1 is None:
        return False
    return dt > 0 and (float(cpu1) - float(cpu0)) / dt > _BUSY_CPU


def _fold_ledger(ledger: list[dict[str, Any]], lines: list[dict[str, Any]]) -> None:
    """A collective is written when issued ("st": "issued", its position predicted) and ended by a
    ``cend`` line (its real range, or the error it raised). Entries without "st" (older runs) are done."""
    for e in lines:
        if e.get("kind") != schema.K_COLL_END:
            ledger.append(e)
            continue
        for c in reversed(ledger[-64:]):
            rng = c.get("seq")
            if c.get("group") == e.get("group") and rng and rng[0] == e.get("s0") and c.get("st") == "issued":
                if e.get("s1") is not None:
                    c["seq"] = [rng[0], int(e["s1"])]
                c["t1"] = e.get("t")
                c["err"] = e.get("err")
                c["st"] = "error" if e.get("err") else ("async" if e.get("async") else "done")
                break


def _global_rank(record: RunRecord, local_rank: int, _path: str) -> int:
    for r in record.ranks.values():
        e = r.event(schema.K_START)
        if e and e.get("local_rank") == local_rank:
            return r.rank
    return local_rank


def load_run(run_dir: str) -> RunRecord:
    """Load a whole run directory (``ddpdoctor analyze``)."""
    reader = RunReader(run_dir)
    record = reader.refresh()
    reader.attach_logs(record)
    return record


def load_runs(run_dirs: list[str]) -> RunRecord:
    """Load the run directories of one job's nodes (each node's ddpdoctor keeps its own ranks) as one
    record: ranks are global, so they merge; the first directory's manifest speaks for the job."""
    records = [load_run(d) for d in run_dirs]
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
