"""Read a run directory into a :class:`RunRecord`. Stdlib only; never unpickles or evaluates anything.

The same reader serves the live monitor (incrementally, :class:`RunReader`) and ``ddpdoctor analyze``
(:func:`load_run`). A truncated last line (a killed rank leaves one) is skipped; an unknown schema
version is refused with a clear message. What each file of ``ranks/<r>/`` feeds is one table
(:mod:`~ddpdoctor.record.streams`); the line readers are in :mod:`~ddpdoctor.record.tails`, the ledger's
folding in :mod:`~ddpdoctor.record.ledger`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any

from . import attempts, flight, schema
from .ledger import fast_ledger, fold_ledger, read_ledger_shared, settle_last
from .streams import APPEND, FOLD, LATEST, STREAMS, WHOLE, progressed, read_whole
from .tails import Tail

_Tail = Tail  # the name the tests use


class RunDirError(Exception):
    """The directory is not a ddpdoctor run directory we can read."""


@dataclass
class RankRecord:
    """What one rank's files say (as far as they have been read)."""

    rank: int
    events: list[dict[str, Any]] = field(default_factory=list)
    last_hb: dict[str, Any] | None = None
    n_hb: int = 0
    seq_changed_t: float | None = None  # when this rank's collective sequence numbers last moved
    progress_t: float | None = None  # when it last showed progress: a step, a collective, a new line, CPU time
    ledger: list[dict[str, Any]] = field(default_factory=list)  # the latest collectives (bounded)
    ledger_trimmed: bool = False  # older collectives were rotated away (ring) or dropped from memory
    flight: dict[str, Any] | None = None  # flight.json's own key ("ddpdoctor": why and when it was dumped)
    stacks: dict[str, Any] | None = None  # the latest dump
    checks: list[dict[str, Any]] = field(default_factory=list)
    fingerprints: list[dict[str, Any]] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None
    stderr_tail: str = ""
    counters: dict[str, Any] = field(default_factory=dict)
    terminated: str = ""  # faulthandler's dump when the rank was sent SIGTERM (where it was)
    fatal: str = ""  # faulthandler's dump when the rank died of a fatal signal (SIGABRT, SIGSEGV)

    def event(self, kind: str) -> dict[str, Any] | None:
        """The latest event of this kind (events.jsonl), or None."""
        for e in reversed(self.events):
            if e.get("kind") == kind:
                return e
        return None

    @property
    def pid(self) -> int | None:
        """The rank's process id (from its start event)."""
        e = self.event(schema.K_START)
        return e.get("pid") if e else None


@dataclass
class RunRecord:
    """A run directory read: its manifest, every rank's record, what the monitor and the launcher wrote."""

    run_dir: str
    manifest: dict[str, Any]
    ranks: dict[int, RankRecord]
    monitor: list[dict[str, Any]]
    launcher: list[dict[str, Any]] = field(default_factory=list)  # the spawning parent (mp.spawn mode)
    # files (relative to the run directory) whose last line is cut: filled by load_run, post-mortem only
    # (a live reader holds a cut line back until its end arrives)
    cut: tuple[str, ...] = ()
    # elastic restarts (record/attempts.py): which attempt of the worker group these ranks are (0: the first),
    # the folder their ranks/ is in when it is not ``run_dir`` (attempts/<k>), and the earlier attempts, each
    # a RunRecord of its own, oldest first (only on the record load_run returns for the whole run)
    attempt: int = 0
    records_dir: str = ""
    attempts: tuple[RunRecord, ...] = ()

    def rank_dir(self, rank: int) -> str:
        """The folder of ``rank``'s files (ranks/<r> of this record's attempt)."""
        return os.path.join(self.records_dir or self.run_dir, schema.RANKS_DIR, str(rank))

    def monitor_event(self, kind: str) -> dict[str, Any] | None:
        """The monitor's latest record of this kind, or None."""
        for e in reversed(self.monitor):
            if e.get("kind") == kind:
                return e
        return None

    @property
    def world_size(self) -> int | None:
        """The largest world size a rank reported at init (None before any init)."""
        sizes = [
            int(e["world_size"])
            for r in self.ranks.values()
            if (e := r.event(schema.K_INIT)) and e.get("world_size") is not None
        ]
        return max(sizes) if sizes else None

    def latest_t(self) -> float:
        """The time of the latest record of the run (monitor, events, heartbeats)."""
        ts = [e.get("t", 0.0) for e in self.monitor]
        for r in self.ranks.values():
            ts += [e.get("t", 0.0) for e in r.events]
            if r.last_hb:
                ts.append(r.last_hb.get("t", 0.0))
        return max(ts) if ts else 0.0


def read_manifest(run_dir: str) -> dict[str, Any]:
    """The run's manifest, checked (schema and version); RunDirError with one clear line otherwise."""
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
    if manifest.get("version") not in schema.READABLE:
        raise RunDirError(
            f"{path}: run format version {manifest.get('version')!r}, this ddpdoctor reads versions "
            f"{', '.join(map(str, schema.READABLE))}; use the ddpdoctor release that wrote it"
        )
    return manifest


class RunReader:
    """Reads a run directory incrementally: call :meth:`refresh` as often as you like."""

    def __init__(self, run_dir: str, share: dict[tuple, list[dict[str, Any]]] | None = None) -> None:
        self.run_dir = run_dir
        # one-shot reading (analyze): ranks whose ledgers are the same but for times share their entries
        self.share = share
        self.manifest = read_manifest(run_dir)
        self._tails: dict[str, Tail] = {}
        self._ranks: dict[int, RankRecord] = {}
        self._monitor: list[dict[str, Any]] = []
        self._launcher: list[dict[str, Any]] = []
        # the ledger kept in memory: twice the ring on disk (the rank's ring size may come from its env)
        ring = self.manifest.get("ledger_ring")
        self.ledger_cap = 2 * max(schema.LEDGER_RING, int(ring) if isinstance(ring, int) else 0)
        self._open: dict[int, dict[tuple, dict[str, Any]]] = {}  # rank -> issued collectives awaiting cend
        self._paths: dict[int, tuple[str, ...]] = {}  # rank -> the paths of STREAMS + WHOLE
        self._cut: set[str] = set()  # ledgers read whole (share) that end in a cut line
        self._folders = {"last_hb": self._fold_beats, "ledger": self._fold_ledger}
        self._wl: dict[int, list[dict[str, Any]]] = {}  # rank -> the ledger the wrappers wrote
        self._fl: dict[int, tuple[tuple, list[dict[str, Any]]]] = {}  # rank -> (flight.json's stat, entries)

    def _tail(self, path: str, ring: bool = False) -> Tail:
        t = self._tails.get(path)
        if t is None:
            t = self._tails[path] = Tail(path, ring)
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
            paths = self._paths.get(r)
            if paths is None:
                d = os.path.join(ranks_dir, name)
                paths = self._paths[r] = tuple(os.path.join(d, f.name) for f in STREAMS + WHOLE)
            for s, path in zip(STREAMS, paths):
                if not (full or s.poll):
                    continue
                if s.how == FOLD:
                    self._folders[s.field](rec, path)
                    continue
                lines = self._tail(path, s.ring).new_records()
                if s.how == APPEND:
                    getattr(rec, s.field).extend(lines)
                elif lines:
                    setattr(rec, s.field, lines[-1])
            for w, path in zip(WHOLE, paths[len(STREAMS) :]):
                if (full or w.poll) and (w.how == LATEST or getattr(rec, w.field) in (None, "")):
                    got, value = read_whole(w, path)
                    if got:
                        setattr(rec, w.field, value)
            if full:
                wl = self._wl.setdefault(r, [])
                settle_last(wl, rec.counters)
                rec.ledger = flight.merge(wl, self._fold_flight(rec, os.path.join(ranks_dir, name, schema.FLIGHT)))
        return RunRecord(
            self.run_dir, self.manifest, dict(sorted(self._ranks.items())), list(self._monitor), list(self._launcher)
        )

    def _fold_beats(self, rec: RankRecord, path: str) -> None:
        for hb in self._tail(path, ring=True).new_records():
            prev = rec.last_hb
            if prev is None or prev.get("seq") != hb.get("seq"):
                rec.seq_changed_t = hb.get("t")
            if prev is None or progressed(prev, hb):
                rec.progress_t = hb.get("t")
            rec.last_hb = hb
            rec.n_hb += 1

    def _fold_ledger(self, rec: RankRecord, path: str) -> None:
        wl = self._wl.setdefault(rec.rank, [])
        if self.share is not None and path not in self._tails:
            wl[:], rec.ledger_trimmed, cut = read_ledger_shared(path, self.share)
            if cut:
                self._cut.add(path)
        else:
            lt = self._tails.get(path)
            if lt is None:
                lt = self._tails[path] = Tail(path, ring=True, fast=fast_ledger)
            fold_ledger(wl, lt.new_records(), self._open.setdefault(rec.rank, {}))
            rec.ledger_trimmed = rec.ledger_trimmed or lt.skipped
        if len(wl) > self.ledger_cap:
            del wl[: len(wl) - self.ledger_cap // 2]
            rec.ledger_trimmed = True
        rec.ledger = wl

    def _fold_flight(self, rec: RankRecord, path: str) -> list[dict[str, Any]]:
        """The rank's flight record as ledger entries, read again only when its file changed (the rank
        rewrites it whole: at a stall, when it raises, at its end)."""
        try:
            st = os.stat(path)
        except OSError:
            return self._fl.get(rec.rank, ((), []))[1]
        key = (st.st_mtime_ns, st.st_size)
        got = self._fl.get(rec.rank)
        if got is not None and got[0] == key:
            return got[1]
        try:
            with open(path, encoding="utf-8") as f:
                dump = json.load(f)
        except (OSError, ValueError):
            self._cut.add(path)  # written atomically: unreadable means damaged after the run
            return got[1] if got else []
        if not isinstance(dump, dict):
            return got[1] if got else []
        own = dump.get("ddpdoctor")
        rec.flight = own if isinstance(own, dict) else {}
        ents = flight.entries(dump, rec.rank, flight.user_dirs_of(self.manifest, dump))
        self._fl[rec.rank] = (key, ents)
        return ents

    def attach_logs(self, record: RunRecord) -> None:
        """Fill each rank's stderr tail from torchrun's --log-dir files (post-mortem only): those of this
        record's attempt (torchrun's ``<run_id>/attempt_<k>/<local_rank>/``, in the run directory's logs/)."""
        k = self.manifest.get("attempt")
        k = k if isinstance(k, int) and k > 0 else 0
        top = os.path.dirname(os.path.dirname(self.run_dir)) if k else self.run_dir  # attempts/<k> -> the run
        logs = os.path.join(top, schema.LOGS_DIR)
        for root, _dirs, files in os.walk(logs):
            if "stderr.log" not in files:
                continue
            local = os.path.basename(root)
            if not local.isdigit():
                continue
            folder = os.path.basename(os.path.dirname(root))
            if folder.startswith("attempt_") and folder != f"attempt_{k}":
                continue  # another attempt's ranks (elastic restarts)
            rank = _global_rank(record, int(local), root)
            if rank in record.ranks:
                try:
                    with open(os.path.join(root, "stderr.log"), "rb") as f:
                        f.seek(0, os.SEEK_END)
                        f.seek(max(0, f.tell() - 16384))
                        record.ranks[rank].stderr_tail += f.read().decode("utf-8", "replace")
                except OSError:
                    pass

    def cut_files(self) -> tuple[str, ...]:
        """The files read so far whose last line is cut (a rank killed mid-write, or a file cut after the
        run), relative to the run directory; post-mortem, where no end of line will arrive any more."""
        paths = {path for path, t in self._tails.items() if t.partial.strip(b"\0 \n")} | self._cut
        return tuple(sorted(os.path.relpath(path, self.run_dir) for path in paths))


def _global_rank(record: RunRecord, local_rank: int, _path: str) -> int:
    for r in record.ranks.values():
        e = r.event(schema.K_START)
        if e and e.get("local_rank") == local_rank:
            return r.rank
    return local_rank


def _load_one(run_dir: str, share: dict[tuple, list[dict[str, Any]]] | None) -> RunRecord:
    reader = RunReader(run_dir, {} if share is None else share)
    record = reader.refresh()
    reader.attach_logs(record)
    cut = reader.cut_files()
    return dataclasses.replace(record, cut=cut) if cut else record


def load_run(run_dir: str, share: dict[tuple, list[dict[str, Any]]] | None = None) -> RunRecord:
    """Load a whole run directory (``ddpdoctor analyze``). After elastic restarts (``attempts/<k>/``) the
    record is the last attempt's ranks, judged as a run of their own, with the earlier attempts in
    ``attempts``; a run without restarts reads as before."""
    record = _load_one(run_dir, share)
    ks = attempts.indices(run_dir)
    if not ks or record.manifest.get("attempt"):
        return record  # no restart, or one attempt's directory given on its own
    return with_attempts(record, [_load_one(attempts.attempt_dir(run_dir, k), share) for k in ks], ks)


def with_attempts(first: RunRecord, later: list[RunRecord], ks: list[int]) -> RunRecord:
    """The run's record from attempt 0's (``first``, the run directory) and the later attempts' (``ks``).

    The monitor's records (monitor.jsonl) are the job's: the last attempt gets all of them (its verdict, the
    kill, torchrun's exit). An earlier attempt ended when torchrun restarted the group: it gets the monitor's
    records from before the next attempt's start, and in place of torchrun's exit a record that says so
    (``exit`` with ``"restarted": k``, returncode null), so the analysis judges its ranks as ended, not as
    still running. Each earlier record's run_dir is its own folder."""
    ends = [float(r.manifest.get("attempt_created") or 0.0) for r in later]
    job = [e for e in first.monitor if e.get("kind") not in (schema.K_EXIT, schema.K_KILL, schema.K_VERDICT)]
    recs, earlier = [first, *later], []
    idx = [0, *ks]
    for i, rec in enumerate(recs[:-1]):
        end = ends[i]
        mon = [e for e in job if float(e.get("t") or 0.0) < end]
        mon.append(
            {
                "v": schema.LINE_VERSION,
                "kind": schema.K_EXIT,
                "rank": None,
                "t": end,
                "returncode": None,
                "restarted": idx[i + 1],
            }
        )
        cut = tuple(c for c in rec.cut if c.startswith(schema.RANKS_DIR + os.sep)) if i == 0 else rec.cut
        earlier.append(dataclasses.replace(rec, monitor=mon, attempt=idx[i], cut=cut))
    last = recs[-1]
    prefix = os.path.join(schema.ATTEMPTS_DIR, str(ks[-1]))
    cut = tuple(c for c in first.cut if not c.startswith(schema.RANKS_DIR + os.sep)) + tuple(
        os.path.join(prefix, c) for c in last.cut
    )
    return dataclasses.replace(
        last,
        run_dir=first.run_dir,
        records_dir=last.run_dir,
        monitor=list(first.monitor),
        launcher=last.launcher,
        attempt=ks[-1],
        attempts=tuple(earlier),
        cut=cut,
    )
