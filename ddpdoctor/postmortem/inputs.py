"""What the paths given to ``ddpdoctor analyze`` hold, apart from ddpdoctor run directories:
flight-recorder dumps, torchrun error files, logs with torchrun's failure summary, and torchrun's log
folder (``attempt_<n>/<local_rank>/``). Every read is bounded; a file that claims to be a dump and is
not one (truncated, foreign, code in a pickle) stops the analysis with one line (InputError)."""

from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import os
import re
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

from ddpdoctor.postmortem import errorfiles, flight

MAX_FILES = 20000  # files looked at under one folder
LOG_BYTES = 16 << 20  # the tail of a log that is read (torchrun's summary is at the end)
LOG_NAMES = (".log", ".txt", ".out", ".err")
_ATTEMPT = re.compile(r"^attempt_(\d+)$")


class InputError(ValueError):
    """Bad input for a post-mortem: the one-line reason (exit code 2)."""


@dataclass
class Inputs:
    """Everything read from the paths, before any judgement."""

    dumps: dict[int, flight.Dump] = field(default_factory=dict)  # by rank
    errors: list[errorfiles.RankError] = field(default_factory=list)  # error files
    summaries: list[errorfiles.RankError] = field(default_factory=list)  # torchrun's failure summaries
    local_ranks: dict[int, set[int]] = field(default_factory=dict)  # attempt -> local ranks in the log folder
    run_dirs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    duplicates: list[tuple[int, str, str, bool]] = field(default_factory=list)  # rank, kept, dropped, same records
    paths: list[str] = field(default_factory=list)
    # rank -> a file named like the dumps (same prefix, the rank at its end) that holds nothing: a dump whose
    # writer died before it wrote, or a file emptied since; that rank counts as one without a dump
    blank: dict[int, str] = field(default_factory=dict)
    every_dump: list[flight.Dump] = field(default_factory=list)  # each dump read, duplicates of a rank too

    def empty(self) -> bool:
        """Nothing a post-mortem can use."""
        return not (self.dumps or self.errors or self.summaries or self.local_ranks or self.blank)


def is_run_dir(path: str) -> bool:
    """A ddpdoctor run directory (the existing loader reads it)."""
    return os.path.isfile(os.path.join(path, "manifest.json"))


def load(paths: list[str]) -> Inputs:
    """Read every path. Raises InputError (one line) for a path that is none of the known kinds, or a
    dump that cannot be read safely."""
    with no_gc():
        return _load(paths)


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic collector held off. A 1,024-rank job's dumps become millions of tuples, none of them in a
    cycle: the collector's passes over the growing heap cost more than the reading (42 us an entry at 256
    ranks, against 32 at 64), and the judge's maps over them the same."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _load(paths: list[str]) -> Inputs:
    inp = Inputs(paths=list(paths))
    # The dumps are read together once every path was looked at (``_read_dumps``: a pool of workers for a large
    # job), in the order they were found. An input error met on the way is raised after the dumps found
    # before it were read: a broken dump before it is the one to report, as when each was read on sight.
    pending: list[str] = []
    try:
        for p in paths:
            if not os.path.exists(p):
                raise InputError(f"{p}: no such file or folder")
            if os.path.isdir(p):
                if is_run_dir(p):
                    inp.run_dirs.append(p)
                    continue
                before = _count(inp) + len(pending)
                _walk(p, inp, pending)
                if _count(inp) + len(pending) == before:
                    raise InputError(
                        f"{p}: not a ddpdoctor run directory (no manifest.json), and no flight-recorder "
                        "dump, torchrun error file or torchrun log in it"
                    )
            elif not _file(p, inp, explicit=True, pending=pending):
                raise InputError(
                    f"{p}: not a flight-recorder dump, a torchrun error file, a log with torchrun's "
                    "failure summary, or a ddpdoctor run directory"
                )
    except InputError:
        _add_dumps(inp, pending, workers=0)
        raise
    _add_dumps(inp, pending)
    inp.dumps = {d.rank: d for d in flight.name_groups(list(inp.dumps.values()))}
    prefixes = {flight.prefix_of(os.path.basename(d.path)) for d in inp.dumps.values()}
    inp.blank = {
        r: p for r, p in inp.blank.items() if r not in inp.dumps and flight.prefix_of(os.path.basename(p)) in prefixes
    }
    if inp.empty() and not inp.run_dirs:
        raise InputError(f"{', '.join(paths)}: only empty files (0 bytes): no flight-recorder records in them")
    return inp


def _blank(path: str) -> bool:
    """A file with nothing in it but whitespace or NULs (it is named like a dump: ``PREFIX<rank>``)."""
    try:
        if os.path.getsize(path) > 64:
            return False
        with open(path, "rb") as f:
            return not f.read().strip(b"\0 \t\r\n")
    except OSError:
        return False


def _count(inp: Inputs) -> int:
    return (
        len(inp.dumps)
        + len(inp.errors)
        + len(inp.summaries)
        + len(inp.run_dirs)
        + sum(map(len, inp.local_ranks.values()))
    )


def _walk(top: str, inp: Inputs, pending: list[str]) -> None:
    seen = 0
    for root, dirs, files in os.walk(top):
        dirs.sort()
        if is_run_dir(root) and root != top:
            inp.run_dirs.append(root)
            dirs[:] = []
            continue
        m = _ATTEMPT.match(os.path.basename(root))
        if m:
            inp.local_ranks.setdefault(int(m.group(1)), set()).update(int(d) for d in dirs if d.isdigit())
        for name in sorted(files):
            seen += 1
            if seen > MAX_FILES:
                inp.notes.append(f"{top}: only the first {MAX_FILES} files were looked at")
                return
            _file(os.path.join(root, name), inp, explicit=False, pending=pending)


def _file(path: str, inp: Inputs, explicit: bool, pending: list[str]) -> bool:
    name = os.path.basename(path)
    if name.endswith(".tmp"):
        return False  # a dump still being written (or abandoned mid-write)
    if name.endswith(".json"):
        if errorfiles.is_error_file(path):
            try:
                inp.errors.append(errorfiles.load(path))
            except errorfiles.ErrorFileError as e:
                raise InputError(str(e)) from None
            return True
        if explicit:
            raise InputError(f"{path}: a JSON file that is neither a flight-recorder dump nor a torchrun error file")
        return False
    rank = flight.rank_of(name)
    if rank is not None and _blank(path):
        inp.blank.setdefault(int(rank), path)  # kept only if real dumps share its prefix (_load)
        return True
    if flight.looks_like_dump(path):
        pending.append(path)  # read with the others (_add_dumps)
        return True
    if name.endswith(LOG_NAMES) or explicit:
        text = _tail(path)
        found = errorfiles.summaries(text)
        inp.summaries.extend(found)
        # the ranks' own tracebacks (worker logs of the log folder, "[rank1]:" lines of the console): the
        # summary alone blames whichever rank the agent saw exit first, often one it ended itself
        own = errorfiles.worker_errors(text, path)
        inp.errors.extend(own)
        return bool(found or own)
    return False


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - LOG_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


POOL_FILES = 16  # dumps from which a pool of workers reads them: a process costs more than a few small files
POOL_BYTES = 16 << 20  # and bytes (a 2,000-entry pickle with stacks is ~270 kB)
MAX_WORKERS = 8


def _read(path: str) -> tuple[flight.Dump | None, str]:
    """One dump, or its one-line reason (a worker's answer: an exception is sent back as its text)."""
    try:
        return flight.load(path).prepare(), ""
    except flight.DumpError as e:
        return None, str(e)


def _worker_init() -> None:
    gc.disable()  # as in the parent (no_gc): a dump's records form no cycle


def workers_for(paths: list[str]) -> int:
    """How many worker processes read ``paths``: 0 (this process) for a small job, or where processes cannot
    be forked safely: only Linux's fork starts a worker without importing the program again, and a fork
    while another thread runs (attach's helpers) may copy a lock that thread holds into the child, held
    forever there."""
    if len(paths) < POOL_FILES or sys.platform != "linux" or "fork" not in mp.get_all_start_methods():
        return 0
    if threading.active_count() > 1:
        return 0
    total = 0
    for p in paths:
        with contextlib.suppress(OSError):
            total += os.path.getsize(p)
    if total < POOL_BYTES:
        return 0
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    n = min(cpus, MAX_WORKERS, len(paths) // 4)
    return n if n >= 2 else 0


def read_dumps(paths: list[str], workers: int | None = None) -> list[tuple[flight.Dump | None, str]]:
    """Each path's Dump or one-line reason, in order. A large job's files are read by a pool of ``workers``
    processes (None: ``workers_for``): unpickling and parsing two million entries is CPU work, and each
    worker sends back its dumps' compact columns, not Entry objects. A pool that cannot start or breaks
    leaves the reading to this process."""
    n = workers_for(paths) if workers is None else workers
    if n >= 2:
        try:
            with ProcessPoolExecutor(n, mp_context=mp.get_context("fork"), initializer=_worker_init) as pool:
                return list(pool.map(_read, paths, chunksize=max(1, len(paths) // (n * 8))))
        except (OSError, BrokenProcessPool):
            pass
    return [_read(p) for p in paths]


def _add_dumps(inp: Inputs, paths: list[str], workers: int | None = None) -> None:
    """Read the dumps found (in the order found) and add them; the first that cannot be read stops the
    analysis with its one line."""
    for d, why in read_dumps(paths, workers):
        if d is None:
            raise InputError(why) from None
        _add_dump(inp, d)


def _add_dump(inp: Inputs, d: flight.Dump) -> None:
    inp.every_dump.append(d)
    old = inp.dumps.get(d.rank)
    if old is None:
        inp.dumps[d.rank] = d
        return
    # the same rank twice: the pickle has stacks; else the larger ring
    keep, drop = (d, old) if (d.stacks, d.n_entries) > (old.stacks, old.n_entries) else (old, d)
    same = set(zip(keep.rid, keep.tns)) >= set(zip(drop.rid, drop.tns))
    inp.dumps[d.rank] = keep
    inp.duplicates.append((d.rank, keep.path, drop.path, same))


JOB_GAP_NS = 5_000 * 1_000_000  # one host's clocks, or two nodes' within this much: the CLOCK_SLACK of the judge


def span(d: flight.Dump) -> tuple[int, int] | None:
    """The first and last creation time of a dump's entries (ns), None where it records none."""
    times = [t for t in d.tns if t]
    return (min(times), max(times)) if times else None


def jobs(inp: Inputs) -> list[Inputs]:
    """The dumps split into the jobs they come from, oldest first: the ranks of one job make their calls
    together, so their dumps' spans of creation times overlap (within the clocks' slack); dumps whose spans lie
    apart, where one rank has a dump on both sides, are of two jobs (or two attempts).
    Each job gets the error files, summaries and logs whose time is nearest its span (all of them where none
    has a time: the newest job). One job (the usual case): ``[inp]``."""
    dumps = [(sp, d) for d in inp.every_dump if (sp := span(d)) is not None]
    if len(dumps) < 2:
        return [inp]
    dumps.sort(key=lambda x: x[0])
    clusters: list[list[flight.Dump]] = []
    end = None
    for (lo, hi), d in dumps:
        if end is None or lo > end + JOB_GAP_NS:
            clusters.append([])
            end = hi
        clusters[-1].append(d)
        end = max(end, hi)
    # one job never holds a rank twice (its pickle and JSON dumps overlap in time): a split that does not put
    # some rank in two jobs is a long-running group's ring (pipeline stages that went on without a stalled rank)
    seen: dict[int, int] = {}
    for k, c in enumerate(clusters):
        for d in c:
            seen.setdefault(d.rank, k)
    if len(clusters) < 2 or not any(seen[d.rank] != k for k, c in enumerate(clusters) for d in c):
        return [inp]
    spans = [(min(span(d)[0] for d in c), max(span(d)[1] for d in c)) for c in clusters]  # type: ignore[index]

    def nearest(t: float | None) -> int:
        if t is None:
            return len(clusters) - 1
        ns = t * 1e9
        return min(
            range(len(spans)),
            key=lambda k: 0 if spans[k][0] <= ns <= spans[k][1] else min(abs(ns - spans[k][0]), abs(ns - spans[k][1])),
        )

    out = []
    for k, c in enumerate(clusters):
        part = Inputs(paths=list(inp.paths), notes=[], run_dirs=list(inp.run_dirs))
        for d in c:
            _add_dump(part, d)
        part.dumps = {d.rank: d for d in flight.name_groups(list(part.dumps.values()))}
        part.errors = [e for e in inp.errors if nearest(e.timestamp) == k]
        part.summaries = [e for e in inp.summaries if nearest(e.timestamp) == k]
        if k == len(clusters) - 1:
            part.local_ranks = dict(inp.local_ranks)
            part.blank = dict(inp.blank)
        out.append(part)
    return out
