"""torch's own flight recorder, read from inside the rank: the rank's record of every collective of every
process group (issue 54).

torch records each collective that reaches a process group in C++ (op, group, positions, sizes, dtypes, the
Python frames), whoever called it: the script, DDP's reducer, FSDP2's all-gathers and reduce-scatters. This
module reads that record instead of re-recording it:

- at every heartbeat, each group's status (``_dump_fr_trace_json(False, False)``: the last position enqueued
  and completed per group, about 20 us): the rank's position on every group, FSDP's included;
- when a group's position stays in flight for a second, the entry there (JSON, no frames, once per position):
  the op the rank waits in, for the live judge;
- when the monitor asks for stacks, when the rank raises and at its end, every entry with its frames
  (``_dump_fr_trace``), written to ``ranks/<r>/flight.json`` as JSON in the shape of torch's own dump, so that
  one loader reads a ddpdoctor run directory and a job's own dumps alike (``record/flight.py``).

The bindings are in torch's C extension, not in its stubs; a torch without them, or a recorder switched off
(``TORCH_FR_BUFFER_SIZE=0``), leaves the rank to the collective wrappers (``rank/collectives.py``), and the
report says which evidence it judged.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

from ddpdoctor.record import digest, schema
from ddpdoctor.record import flight as record_flight
from ddpdoctor.record.flight import dtype_name, op_name, position
from ddpdoctor.record.writer import write_json_atomic

# torch's default ring size where neither variable is set (torch/csrc/distributed/c10d/FlightRecorder.hpp)
DEFAULT_BUFFER = 2000
BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
# a call in flight this long (s) is read as the rank's pending call; the entries (a JSON read of the whole ring: about
# 40 ms for 2,000 entries on gloo, whose entries never leave "scheduled", so onlyActive filters nothing) at most once
# per READ_EVERY: a slow step's all-reduces on a loaded host would otherwise cost the heartbeat a read at every beat
PENDING_AFTER = 1.0
READ_EVERY = 2.0
# the heartbeat's reads of the ring for its chunks (record/digest.py chunks_of) take at most this share of one core
# (their CPU time over the time since the rank started): a read of 2,000 entries with frames holds the GIL 20-30 ms
# here, so a job making more than about a ring of calls every 5 s gets chunks with gaps, which the analysis names as
# unread, never as agreeing (at 1 %, the comm-heavy loop's whole run cost 0.037 of CPU beyond the A/A control)
CHUNK_SHARE = 0.005
# s of reads allowed beyond that share: one read that happens to pay for a full garbage collection of the process
# (60 ms seen here, where a read of 64 entries takes 2 ms) does not stop the reads for the next 6 s
CHUNK_SLACK = 0.05

# The public collectives each backend's recorder records (torch 2.13, read in its source and checked by
# tests/e2e/test_flight_record.py): ProcessGroupGloo records every op it enqueues except send and recv, which bypass
# the recorder (so monitored_barrier, made of them, is not recorded either); NCCL's recorder records its p2p too.
RECORDED = {
    "gloo": (schema.SHAPED | schema.OTHER) - {"monitored_barrier"},
    "nccl": (schema.SHAPED | schema.OTHER | schema.P2P) - {"monitored_barrier"},
}


class _Source(NamedTuple):
    """One of torch's recorders: its prefix for group ids ("" for the backend-neutral one), its dumps."""

    prefix: str
    dump_json: Any  # (includeCollectives, onlyActive) -> JSON text, no frames
    dump_pickle: Any  # (includeCollectives, includeStackTraces, onlyActive) -> pickle bytes


def _sources() -> list[_Source]:
    """torch's recorders in this build: the backend-neutral one (gloo and the rest; ``_dump_fr_trace``) and,
    on a CUDA build with a GPU, NCCL's own (``_dump_nccl_trace``). None before torch had the bindings."""
    try:
        import torch._C._distributed_c10d as c10d
    except ImportError:
        return []
    out = []
    if hasattr(c10d, "_dump_fr_trace") and hasattr(c10d, "_dump_fr_trace_json"):
        out.append(_Source("", c10d._dump_fr_trace_json, c10d._dump_fr_trace))
    if hasattr(c10d, "_dump_nccl_trace") and hasattr(c10d, "_dump_nccl_trace_json"):
        try:
            import torch

            cuda = torch.cuda.is_available()
        except Exception:
            cuda = False
        if cuda:
            out.append(_Source("nccl:", c10d._dump_nccl_trace_json, c10d._dump_nccl_trace))
    return out


_lazy_lock = threading.Lock()


@contextlib.contextmanager
def _no_inductor_import() -> Iterator[None]:
    """torch's symbolizer asks ``hasattr(torch, "_inductor")`` at every dump with frames, to map the frames of
    Inductor's generated code (torch/csrc/profiler/python/combined_traceback.cpp); torch's lazy module
    ``__getattr__`` answers by importing torch._inductor: 3 to 8 s of one core on this host, the first time in
    a process. Where torch._inductor is not loaded, no frame can be its generated code: for the dump's few ms
    that one lazy name reads as absent to the dumping thread alone (any other thread's lookup meanwhile gets
    torch's own answer, and an ``import torch._inductor`` goes through the import system, not this lookup)."""
    torch = sys.modules.get("torch")
    if torch is None or "torch._inductor" in sys.modules:
        yield
        return
    with _lazy_lock:
        lazy = torch.__dict__.get("__getattr__")
        if lazy is None:
            yield
            return

        me = threading.get_ident()

        def getattr_(name: str) -> Any:
            if name == "_inductor" and threading.get_ident() == me:
                raise AttributeError(name)
            return lazy(name)  # the script's own threads: torch's answer, whatever the dump is doing

        torch.__getattr__ = getattr_
        try:
            yield
        finally:
            torch.__getattr__ = lazy


def buffer_size(env: dict[str, str] | os._Environ[str]) -> int:
    """The recorder's ring size as torch reads it (the first variable set wins; unreadable: torch's 0)."""
    for var in BUFFER_VARS:
        v = env.get(var)
        if v is not None and v.strip():
            try:
                return int(v)
            except ValueError:
                return 0
    return DEFAULT_BUFFER


def _plain(v: Any) -> Any:
    """A dump value as JSON keeps it: tuples become lists (group names, sizes), the rest is already plain."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


class Recorder:
    """One rank's view of torch's flight recorder: ``on`` where it records, ``off_reason`` where not."""

    def __init__(self, env: dict[str, str] | os._Environ[str] | None = None) -> None:
        env = os.environ if env is None else env
        self.sources = _sources()
        self.size = buffer_size(env)
        self.off_reason = ""
        if not self.sources:
            self.off_reason = "this torch has no flight-recorder bindings (torch._C._distributed_c10d._dump_fr_trace)"
        elif self.size <= 0:
            set_by = next((v for v in BUFFER_VARS if env.get(v) is not None), BUFFER_VARS[0])
            self.off_reason = f"the flight recorder is off ({set_by}={env.get(set_by, '')!r})"
        self.on = not self.off_reason
        self.names: dict[str, list[str]] = {}  # the recorder's group id -> [group name, description]
        self._flight: tuple[str, int] | None = None  # (group id, position) in flight at the last beat
        self._flight_since = 0.0  # since when (monotonic) that position has been in flight
        self._read_at = -READ_EVERY  # the last read of the entries for a pending call (monotonic)
        self._entry: tuple[tuple[str, int], dict[str, Any] | None] | None = None  # the entry read for it
        self.chunks = Chunks(self.size)

    def settled(self) -> bool:
        """May the recorder be read from another thread now? torch 2.13 adds a group's status to the recorder's
        table at the group's first recorded op without holding the recorder's lock (``FlightRecorder::record``),
        so a dump iterating that table at that moment can crash the process (seen once, a rank's heartbeat in
        ``status()`` while its main thread made DDP's first collective). Read only while every process group
        has made its first op: a group made later is then the only window left, and it lasts one insertion."""
        dist = sys.modules.get("torch.distributed")
        try:
            groups = list(dist.distributed_c10d._world.pg_map) if dist is not None else []
            return all(pg._get_sequence_number_for_group() > 0 for pg in groups)
        except Exception:  # a torch without this table or these counters: read as before
            return True

    def status(self, blocked: bool = False) -> dict[str, tuple[int, int]]:
        """Per group id, (last position enqueued, last position completed); {} where it cannot say (and
        while a group has yet to make its first op: :meth:`settled`, unless ``blocked``: the main thread has sat
        at one instruction of one torch.distributed call since the last beat, past the enqueue where a group's
        first op adds its status, so no insertion races this read; a group kept for the end, as a mesh job's
        default group waits for its final barrier, would otherwise hide every position of the run)."""
        out: dict[str, tuple[int, int]] = {}
        if not blocked and not self.settled():
            return out
        for src in self.sources if self.on else ():
            try:
                raw = json.loads(src.dump_json(False, False))
            except Exception:  # a recorder that cannot answer now answers at the next beat
                continue
            for gid, st in (raw.get("pg_status") or {}).items():
                try:
                    enq, done = int(st.get("last_enqueued_collective")), int(st.get("last_completed_collective"))
                except (TypeError, ValueError, AttributeError):
                    continue
                out[src.prefix + str(gid)] = (enq, done)
        return out

    def recorded_ops(self, backend: str) -> frozenset[str]:
        """The public collectives this recorder records on ``backend`` (``gloo``, ``nccl``, or per device
        ``cpu:gloo,cuda:nccl``: the ops every one of them records); empty where it records none of them
        (off, a backend without a recorder, NCCL's recorder unread: no GPU)."""
        prefixes = {src.prefix for src in self.sources} if self.on else set()
        if backend.lower() == "undefined":  # a group made without a backend (init_device_mesh): torch's defaults
            backend = "cpu:gloo,cuda:nccl" if "nccl:" in prefixes else "cpu:gloo"
        out: frozenset[str] | None = None
        for part in backend.lower().split(","):
            name = part.split(":")[-1].strip()
            ops = RECORDED.get(name, frozenset())
            if ("nccl:" if name == "nccl" else "") not in prefixes:
                ops = frozenset()
            out = frozenset(ops) if out is None else out & ops
        return out or frozenset()

    def name_of(self, gid: str) -> str | None:
        """The group name of a recorder group id, learnt from its entries (None: no entry named it yet)."""
        got = self.names.get(gid)
        return got[0] if got else None

    def learn(self, entries: list[dict[str, Any]], prefix: str = "") -> None:
        """Group ids -> names and descriptions, from entries (their ``process_group`` is [name, desc])."""
        for e in entries:
            gid, pg = prefix + str(e.get("pg_id")), e.get("process_group")
            if gid not in self.names and isinstance(pg, (list, tuple)) and pg:
                self.names[gid] = [str(pg[0]), str(pg[1]) if len(pg) > 1 else ""]

    def _entries(self) -> list[tuple[str, dict[str, Any]]]:
        """Every entry without frames, each with its source's prefix. The pickle dump, not the JSON one: a
        ring of 2,000 reads in about a fifth of the JSON's time (the JSON's text is built and parsed again)."""
        out = []
        for src in self.sources:
            try:
                # our own process's dump, made by torch's C++ a moment ago: not foreign input
                raw = pickle.loads(src.dump_pickle(True, False, False))
            except Exception:
                continue
            entries = raw.get("entries") or []
            self.learn(entries, src.prefix)
            out += [(src.prefix, e) for e in entries]
        return out

    def positions(self, status: dict[str, tuple[int, int]]) -> dict[str, int]:
        """Group name -> its last enqueued position, for the groups whose names are known; an unknown id
        (a group's first collectives) costs one read of the entries, once."""
        if any(gid not in self.names for gid in status):
            self._entries()
        # a group destroyed and made again under the same name (init after destroy) gets a new id, and torch keeps
        # the old id's status: the newest id of a name is the group that lives
        out: dict[str, int] = {}
        for gid in sorted((g for g in status if g in self.names), key=_id_order):
            out[self.names[gid][0]] = status[gid][0]
        return out

    def pending(
        self, status: dict[str, tuple[int, int]], where: list | None, asked: bool = False
    ) -> dict[str, Any] | None:
        """The collective the rank has been in for PENDING_AFTER seconds at least (a position enqueued and
        not completed), as the heartbeat's ``pending``; the entry is read once per position, and at most once
        per READ_EVERY. ``where``: the main thread's line now (the recorder's frames are only in full dumps).
        ``asked``: the monitor asked for this rank's stacks (a verdict is being made): whatever is in flight is
        read now, without those waits, so that the verdict's records say what each rank waits on."""
        flight = None
        newest = {self.names[g][0]: g for g in sorted((g for g in status if g in self.names), key=_id_order)}
        for gid, (enq, done) in status.items():
            if gid in self.names and newest.get(self.names[gid][0]) != gid:
                continue  # a destroyed group's status, which torch keeps (positions)
            if enq > done:
                flight = (gid, max(done, 0) + 1)  # -1: nothing completed yet (positions count from 1)
                break
        now = time.monotonic()
        if flight != self._flight:
            self._flight, self._flight_since = flight, now
            if not asked:
                return None
        if flight is None or (now - self._flight_since < PENDING_AFTER and not asked):
            return None  # a call in flight for less than that is a step's own all-reduce, not a wait
        if self._entry is None or self._entry[0] != flight:
            if now - self._read_at < READ_EVERY and not asked:
                return None  # one read of the entries (tens of ms for a full ring) per READ_EVERY at most
            self._read_at = now
            # the first recorded call past the last completed one: gloo counts its p2p ops in the group's op ids
            # but neither records them nor marks them completed, so the positions after ``done`` may be sends and
            # receives that returned (a pipeline stage's), and the call the rank waits in is the next recorded one
            found = None
            for prefix, e in self._entries():
                if prefix + str(e.get("pg_id")) == flight[0] and flight[1] <= position(e) <= status[flight[0]][0]:
                    if found is None or position(e) < position(found):
                        found = e
            self._entry = (flight, found)
        e = self._entry[1]
        if e is None:
            return None
        return {
            "op": op_name(e),
            "group": self.name_of(flight[0]) or flight[0],
            "seq": position(e),
            "shapes": e.get("input_sizes") or [],
            "dtypes": [dtype_name(d) for d in e.get("input_dtypes") or []],
            "site": where,
            "since": (e.get("time_created_ns") or 0) / 1e9,
            "source": "flight",
        }

    def read_chunks(self, status: dict[str, tuple[int, int]], rank: int) -> None:
        """One read of the ring, with frames, folded into :attr:`chunks` when one is due (:meth:`Chunks.due`)."""
        if not (self.on and status and self.chunks.due(status)):
            return
        t0 = time.thread_time()
        d = self.dump(True, plain=False)  # no copy into lists: the chunks read each entry once, as it is
        if d is not None:
            self.chunks.fold(d, rank, _script_dir(), t0)

    def dump(self, frames: bool = True, plain: bool = True) -> dict[str, Any] | None:
        """Every entry (with its Python frames), as a plain dict in the shape of torch's own dump; where
        NCCL's recorder holds entries too, theirs follow, each source's group ids prefixed as in
        :meth:`status`. ``plain=False``: torch's tuples left as they are (not for JSON)."""
        out: dict[str, Any] | None = None
        for src in self.sources if self.on else ():
            try:
                # our own process's dump, made by torch's C++ a moment ago: not foreign input
                with _no_inductor_import() if frames else contextlib.nullcontext():
                    blob = src.dump_pickle(True, frames, False)
                raw = pickle.loads(blob)
                raw = _plain(raw) if plain else raw
            except Exception:
                continue
            self.learn(raw.get("entries") or [], src.prefix)
            if out is None:
                out = raw
                continue
            for e in raw.get("entries") or []:
                e["pg_id"] = src.prefix + str(e.get("pg_id"))
            out.setdefault("entries", []).extend(raw.get("entries") or [])
            for gid, st in (raw.get("pg_status") or {}).items():
                out.setdefault("pg_status", {})[src.prefix + str(gid)] = st
        return out

    def write(self, path: str, rank: int, reason: str, frames: bool = True) -> bool:
        """The dump to ``path`` (JSON, atomically), with ddpdoctor's own key: the rank, why, when and the
        group ids' names. False where there was nothing to write."""
        t0, cpu0 = time.monotonic(), time.thread_time()
        d = self.dump(frames)
        if d is None:
            return False
        if frames and reason != "abort":
            # the chunks fold calls with their lines: only a read with frames; not on gloo's abort, whose few ms
            # before the process dies are the dump's alone (rank/onabort.py)
            self.chunks.fold(d, rank, _script_dir(), cpu0, wait=1.0)
        d["ddpdoctor"] = {
            "rank": rank,
            "reason": reason,
            "t": time.time(),
            "groups": {gid: [*nd, _ranks_of(nd[0])] for gid, nd in self.names.items()},
            "buffer": self.size,
            # the oldest entry's id (ids count every recorded call of every group from 0): above 0, the ring wrapped
            "first_record": min(
                (e["record_id"] for e in d.get("entries") or () if isinstance(e.get("record_id"), int)), default=0
            ),
            # the script's folder: its frames are the user's code wherever the reader runs
            "script_dir": _script_dir(),
            "took_s": round(time.monotonic() - t0, 4),
            "chunks": self.chunks.fields(),
        }
        write_json_atomic(path, d)
        return True


def _script_dir() -> str:
    return os.path.dirname(os.path.abspath(sys.argv[0])) if sys.argv and sys.argv[0] else ""


class Chunks:
    """The digest and per-line call counts of every whole chunk of each group's positions the rank's reads of
    the recorder saw (record/digest.py ``chunks_of``): what a running digest of every call gave the wrappers, at
    one read of the ring, with frames, per half a ring of calls and at most CHUNK_SHARE of one core."""

    def __init__(self, buffer: int) -> None:
        self.size = digest.chunk_size(buffer)
        # a read per half a ring of calls (every group's together), CHUNK_SHARE permitting: each read holds about two
        # new chunks, and a slow beat may fall a quarter of a ring further behind before a chunk goes unread
        self.every = max(self.size, buffer // 2)
        self.groups: dict[str, dict[str, list]] = {}
        self._read_at = 0  # every group's positions together at the last read
        self._t0 = time.monotonic()
        self.reads, self.spent = 0, 0.0  # reads folded, and their CPU seconds (the reading thread's)
        self._lock = threading.Lock()

    def due(self, status: dict[str, tuple[int, int]]) -> bool:
        """Is a read due: half a ring of calls since the last one, and the reads' CPU seconds so far within
        CHUNK_SHARE of the time since the rank started, plus CHUNK_SLACK?"""
        total = sum(max(enq, 0) for enq, _done in status.values())
        if total - self._read_at < self.every:
            return False
        return self.spent <= CHUNK_SLACK + CHUNK_SHARE * (time.monotonic() - self._t0)

    def fold(self, dump: dict[str, Any], rank: int, script_dir: str, since: float, wait: float = 0.0) -> None:
        """Adds the whole chunks of one dump with frames (torch's shape) that are not yet known; ``since``: the
        reading thread's CPU time (``time.thread_time``) when the dump began, for the reads' cost; ``wait``: how
        long to wait for another thread's fold (0: none, the heartbeat's reads; a written dump's waits, bounded,
        so that flight.json's chunks hold the dump it writes)."""
        if not (self._lock.acquire(timeout=wait) if wait > 0 else self._lock.acquire(blocking=False)):
            return  # another thread is folding a read of the same ring
        try:
            raw = dump.get("entries") or []
            ids = [e["record_id"] for e in raw if isinstance(e.get("record_id"), int)]
            wrapped = bool(ids) and min(ids) > 0  # ids count every recorded call from 0: the oldest ones are gone
            # only the entries of chunks not yet known are read as calls (a chunk known whole left out whole does
            # not move where an unknown one starts)
            new = [e for e in raw if str((position(e) - 1) // self.size) not in self.groups.get(_group_of(e), {})]
            entries = record_flight.entries(
                {**dump, "entries": new}, rank, (script_dir.rstrip(os.sep) + os.sep,) if script_dir else ()
            )
            for g, got in digest.chunks_of(entries, wrapped, self.size, self.groups).items():
                self.groups.setdefault(g, {}).update(got)
            st = dump.get("pg_status") or {}
            self._read_at = sum(max(int(v.get("last_enqueued_collective", 0) or 0), 0) for v in st.values())
            self.reads, self.spent = self.reads + 1, self.spent + max(time.thread_time() - since, 0.0)
        except Exception:  # a dump of another shape: no chunks from it, the run goes on
            pass
        finally:
            self._lock.release()

    def fields(self) -> dict[str, Any]:
        """flight.json's ``chunks``: the chunk size and, per group, ``{k: [digest, {"op file:line": n}]}``."""
        return {
            "size": self.size,
            "reads": self.reads,
            "read_s": round(self.spent, 4),
            "groups": {g: dict(ks) for g, ks in list(self.groups.items())},
        }


def _group_of(e: dict[str, Any]) -> str:
    """An entry's group name, as record/flight.py's ``entries`` reads it (its id where the entry names none)."""
    pg = e.get("process_group")
    return str(pg[0]) if isinstance(pg, (list, tuple)) and pg else str(e.get("pg_id"))


def _id_order(gid: str) -> tuple[str, int]:
    """A recorder group id's order: by source prefix, then numerically (``"10"`` after ``"9"``)."""
    prefix, _, num = gid.rpartition(":")
    try:
        return (prefix, int(num))
    except ValueError:
        return (prefix, -1)


def _ranks_of(name: str) -> list[int] | None:
    """The global ranks of the process group named ``name`` (torch's own table), None where it is gone."""
    try:
        import torch.distributed as dist

        for pg, n in list(dist.distributed_c10d._world.pg_names.items()):
            if n == name:
                return list(dist.get_process_group_ranks(pg))
    except Exception:  # a group destroyed meanwhile, or a torch without this table: the ranks are unknown
        return None
    return None
