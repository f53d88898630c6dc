"""DataLoader workers' own memory: the USS, PSS and RSS of each worker process, and the Dataset attributes
that hold Python objects (the copy-on-read growth of pytorch/pytorch#13246).

A forked worker shares its parent's pages; reading a Python object writes its reference count, which
copies the object's page into the worker. RSS does not show it (the page was already counted, shared);
USS (private pages) and PSS do. Reading them takes ``/proc/PID/smaps_rollup`` (psutil's
``memory_full_info``: a page-table walk, about a millisecond, more on a busy host), so they are sampled on
the heartbeat thread on a time schedule, never per step: every ``DENSE_S`` for the first ``DENSE`` samples
of a pass (the copy grows fastest at first; at most ``DENSE_BUDGET`` of the heartbeat thread's CPU time),
then every ``SAMPLE_S`` (at most ``BUDGET``); and every ``DENSE_S`` again while a worker's private memory
reaches new highs, ``MOVED`` or more above its highest before: the copy grows when the workers read, which
can be late in the pass (a loop whose first steps are slow reads its whole epoch in its last seconds). Batches
in flight move the figures both ways around a level; only growth makes new highs.

The training thread pays twice per pass of a loader with workers: when the pass begins
(``_MultiProcessingDataLoaderIter._reset``, called when the iterator is made and at every epoch of
``persistent_workers``): the worker pids, and on the loader's first pass a look at its Dataset's attributes
(``stores``); and when the iterator shuts its workers down (``_shutdown_workers``): one last sample of
them, taken before they exit. The analysis judges a worker by its level at the end (the median of its last
samples), so a pass that copied in its last second still has that level twice (the last beat's sample and
this one), whatever the heartbeat's schedule managed.
"""

from __future__ import annotations

import functools
import itertools
import sys
import threading
import time
import weakref
from typing import Any

from ddpdoctor.rank import failures, sites
from ddpdoctor.rank.probes.memleak import storesite
from ddpdoctor.record import schema

DENSE = 6  # samples of a pass taken every DENSE_S
DENSE_S = 0.5
SAMPLE_S = 1.0  # then this often
BUDGET = 0.02  # share of the heartbeat thread's CPU time the samples may take (a slower schedule beyond)
DENSE_BUDGET = 0.05  # ... while a pass is young: a short epoch still gets its points (the copy fills in seconds)
END_WAIT = 0.5  # s the training thread waits, at a pass's end, for the heartbeat's sample in progress
MOVED = 8 << 20  # a worker's USS (PSS) this much above its highest before: the next sample DENSE_S later again
MIN_ITEMS = 1000  # a Dataset attribute shorter than this is not what a worker copies in bulk
MIN_BYTES = 1 << 20  # ... nor one whose objects take less than this
SAMPLE_ITEMS = 32  # elements sized to estimate an attribute's bytes
MAX_DATASETS = 16  # Dataset objects looked at per loader (wrappers, ConcatDataset parts)
MAX_STORES = 4  # attributes recorded per loader, biggest first
MAX_LOADERS = 64  # loaders remembered (past this, the ones already freed are forgotten)


class _Pass:
    """One iterator's workers, sampled until the iterator shuts them down or is gone."""

    __slots__ = ("it", "loader", "ordinal", "k", "pids", "procs", "n", "gone", "high")

    def __init__(self, it: Any, loader: int, ordinal: int, k: int, pids: list[int]) -> None:
        self.it = weakref.ref(it)
        self.loader, self.ordinal, self.k, self.pids = loader, ordinal, k, pids
        self.procs: dict[int, Any] = {}  # pid -> psutil.Process, made on the heartbeat thread
        self.n = 0  # samples taken of this pass
        self.gone: set[int] = set()  # workers that exited
        self.high: dict[int, int] = {}  # pid -> the highest USS (PSS where there is no USS) of its samples


class Workers:
    """The rank's DataLoader worker processes: their passes (training thread) and memory (heartbeat thread)."""

    def __init__(self, probe: Any, writer: Any, step: Any) -> None:
        self.p = probe
        self.w = writer
        self.step = step  # the memory probe's step counter (a callable), for the records' context
        self.passes: list[_Pass] = []
        self.lock = threading.Lock()  # the training thread adds passes while the heartbeat thread drops ended ones
        # one sampler of a pass at a time: the heartbeat's tick, or the training thread's last sample at shutdown
        self.sampling = threading.Lock()
        self.loaders: dict[int, tuple[int, Any, int]] = {}  # id(loader) -> (ordinal, weakref, passes so far)
        self.n_loaders = 0
        self.iterators = 0
        self.next_due = 0.0
        self.cpu = 0.0  # heartbeat CPU seconds the samples took

    # -- the training thread: one call per pass of a loader with workers ----------------------------
    def install(self) -> None:
        """Wrap ``_MultiProcessingDataLoaderIter._reset`` (a new iterator, and each epoch of persistent ones)."""
        from torch.utils.data import dataloader as dl_mod

        cls = dl_mod._MultiProcessingDataLoaderIter
        reset = cls._reset
        if hasattr(reset, "__ddpdoctor_wrapped__"):
            return
        me = self

        @functools.wraps(reset)
        def _reset(it: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
            reset(it, loader, *args, **kwargs)
            try:
                me.on_pass(it, loader)
            except Exception as e:
                failures.report(
                    me.p,
                    "memleak DataLoader workers",
                    "the memory of the DataLoader's worker processes (their copy-on-read growth goes unseen)",
                    e,
                )

        _reset.__ddpdoctor_wrapped__ = reset  # type: ignore[attr-defined]
        cls._reset = _reset
        shutdown = cls._shutdown_workers
        if hasattr(shutdown, "__ddpdoctor_wrapped__"):
            return

        @functools.wraps(shutdown)
        def _shutdown_workers(it: Any, *args: Any, **kwargs: Any) -> None:
            try:
                me.on_end(it)
            except Exception as e:
                failures.report(
                    me.p,
                    "memleak DataLoader workers",
                    "the last sample of the DataLoader's workers before they exit (a late copy may go unseen)",
                    e,
                )
            shutdown(it, *args, **kwargs)

        _shutdown_workers.__ddpdoctor_wrapped__ = shutdown  # type: ignore[attr-defined]
        cls._shutdown_workers = _shutdown_workers

    def on_pass(self, it: Any, loader: Any) -> None:
        """A pass of ``loader`` begins on iterator ``it``, whose workers have started: record the pids (and, on
        the loader's first pass, the Dataset's stores); the next heartbeat samples them."""
        known = self.loaders.get(id(loader))
        first = known is None or known[1]() is not loader  # a recycled id is a new loader
        if first:
            if len(self.loaders) >= MAX_LOADERS:  # a script that makes a DataLoader per epoch: forget the freed ones
                self.loaders = {i: v for i, v in self.loaders.items() if v[1]() is not None}
            self.n_loaders += 1
            known = (self.n_loaders - 1, weakref.ref(loader), 0)
        assert known is not None
        ordinal, ref, k = known
        self.loaders[id(loader)] = (ordinal, ref, k + 1)
        mine = it.__dict__.get("_ddpdoctor_workers")
        if mine is None:
            self.iterators += 1
            mine = it.__dict__["_ddpdoctor_workers"] = self.iterators - 1
        pids = [int(w.pid) for w in getattr(it, "_workers", ()) if getattr(w, "pid", None)]
        fields: dict[str, Any] = {}
        if first:
            ds = getattr(loader, "dataset", None)
            fields["dataset"] = type(ds).__name__
            try:
                fields["stores"] = stores(ds)
            except Exception as e:
                failures.report(
                    self.p,
                    "memleak Dataset stores",
                    "which Dataset attribute holds Python objects (a worker growth finding has no line)",
                    e,
                )
        self.w.write(
            schema.K_WORKER_PASS,
            self.p.rank,
            loader=ordinal,
            it=mine,
            k=k,
            step=self.step(),
            pids=pids,
            persistent=bool(getattr(loader, "persistent_workers", False)),
            site=sites.user_site(sys._getframe(1)),
            **fields,
        )
        with self.lock:
            self.passes = [ps for ps in self.passes if ps.it() is not it] + [_Pass(it, ordinal, mine, k, pids)]
        self.next_due = 0.0

    def on_end(self, it: Any) -> None:
        """The iterator ``it`` is about to shut its workers down: sample them once more while they still hold
        what they copied (on the training thread only: a ``__del__`` run by the collector on another thread, or
        at the interpreter's exit, takes none; never waits more than ``END_WAIT`` for a sample in progress)."""
        if getattr(it, "_shutdown", True) or sys.is_finalizing() or threading.get_ident() != self.p.main_ident:
            return
        ps = next((p for p in self.passes if p.it() is it), None)
        if ps is None or not self.sampling.acquire(timeout=END_WAIT):
            return
        try:
            c0 = time.thread_time()
            self._sample(ps)
            self.p.cost.add_exact(time.thread_time() - c0)  # the training thread's, once per pass
        finally:
            self.sampling.release()
        with self.lock:
            self.passes = [p for p in self.passes if p is not ps]

    # -- the heartbeat thread --------------------------------------------------------------------
    def tick(self) -> None:
        """Sample the live passes' workers when due (a run without workers returns at once)."""
        if not self.passes:
            return
        now = time.monotonic()
        if now < self.next_due:
            return
        c0 = time.thread_time()
        snap = list(self.passes)
        done = set()
        dense = False
        with self.sampling:
            for ps in snap:
                it = ps.it()
                if it is None or getattr(it, "_shutdown", False):
                    done.add(ps)
                    continue
                moved = self._sample(ps)
                if moved is None:
                    done.add(ps)
                    continue
                dense = dense or moved or ps.n < DENSE
        if done:
            with self.lock:
                self.passes = [ps for ps in self.passes if ps not in done]
        cost = time.thread_time() - c0
        self.cpu += cost
        self.next_due = time.monotonic() + (
            max(DENSE_S, cost / DENSE_BUDGET) if dense else max(SAMPLE_S, cost / BUDGET)
        )

    def _sample(self, ps: _Pass) -> bool | None:
        """One sample of the pass's live workers, written as a ``worker_mem`` record: whether a worker's private
        memory rose ``MOVED`` or more above its highest before; None when none of them is left (the caller
        holds ``self.sampling``)."""
        import psutil

        out = []
        moved = False
        for wid, pid in enumerate(ps.pids):
            if pid in ps.gone:
                continue
            try:
                proc = ps.procs.get(pid)
                if proc is None:
                    proc = ps.procs[pid] = psutil.Process(pid)
                m = proc.memory_full_info()
            except psutil.Error:  # the worker exited (or its smaps are unreadable): it has no memory to count
                ps.gone.add(pid)
                continue
            uss, pss = int(m.uss), int(getattr(m, "pss", 0))
            private = uss or pss
            high = ps.high.get(pid)
            moved = moved or (high is not None and private >= high + MOVED)
            ps.high[pid] = max(private, high or 0)
            out.append({"pid": pid, "id": wid, "uss": uss, "pss": pss, "rss": int(m.rss)})
        if not out:
            return None
        ps.n += 1
        self.w.write(schema.K_WORKER_MEM, self.p.rank, loader=ps.loader, it=ps.ordinal, k=ps.k, step=self.step(), w=out)
        return moved


def _is_dataset(v: Any) -> bool:
    data = sys.modules.get("torch.utils.data")
    return data is not None and isinstance(v, data.Dataset)


def _bytes(x: Any) -> int:
    """What one element's Python objects take (the object, and its direct items): the pages a worker
    copies when it reads it. An array or tensor counts its header only: its buffer is not a Python object."""
    if hasattr(x, "__array_interface__") or type(x).__module__.startswith("torch"):
        return 112
    n = sys.getsizeof(x)
    if isinstance(x, dict):
        n += sum(sys.getsizeof(v) for v in itertools.islice(x.values(), 16))
    elif isinstance(x, (list, tuple, set)):
        n += sum(sys.getsizeof(v) for v in itertools.islice(x, 16))
    return n


def _store(obj: Any, name: str, v: Any) -> dict[str, Any] | None:
    """One attribute as a store of Python objects: {attr, container, elem, len, bytes}, or None."""
    if isinstance(v, (list, tuple)):
        n = len(v)
        if n < MIN_ITEMS:
            return None
        sample = [v[i * n // SAMPLE_ITEMS] for i in range(SAMPLE_ITEMS)]
    elif isinstance(v, dict):
        n = len(v)
        if n < MIN_ITEMS:
            return None
        sample = [k_v for k_v in itertools.islice(v.items(), SAMPLE_ITEMS)]
    elif getattr(getattr(v, "dtype", None), "hasobject", False) and getattr(v, "ndim", 0) >= 1:
        # a numpy array of dtype object holds Python objects too (np.array(records, dtype=object))
        n = int(v.size)
        if n < MIN_ITEMS or v.dtype != object:
            return None
        sample = [v.flat[i * n // SAMPLE_ITEMS] for i in range(SAMPLE_ITEMS)]  # .flat: no copy of the array
    else:
        return None
    elems = [b for _a, b in sample] if isinstance(v, dict) else sample
    if all(_is_dataset(x) for x in elems):
        return None  # Datasets are walked into (stores()), not counted as a store
    if isinstance(v, dict):
        per = sum(_bytes(a) + _bytes(b) for a, b in sample) / len(sample)
    else:
        per = sum(_bytes(x) for x in sample) / len(sample)
    total = int(per * n) + sys.getsizeof(v)
    if total < MIN_BYTES:
        return None
    elem = type(elems[0]).__name__
    out = {"cls": type(obj).__name__, "attr": name, "container": type(v).__name__, "elem": elem, "len": n}
    out["bytes"] = total
    site = assign_site(type(obj), name)
    if site:
        out.update(site)
    return out


def stores(ds: Any) -> list[dict[str, Any]]:
    """The attributes of ``ds`` (and of the Datasets it wraps: ``Subset.dataset``, ``ConcatDataset.datasets``,
    a user wrapper's Dataset attributes) that hold many Python objects, biggest first: each with the class,
    attribute, container, element type, length, estimated bytes and the line that assigns it."""
    found: list[dict[str, Any]] = []
    seen: set[int] = set()
    todo: list[Any] = [ds]
    while todo and len(seen) < MAX_DATASETS:
        obj = todo.pop(0)
        if obj is None or id(obj) in seen:
            continue
        seen.add(id(obj))
        attrs = getattr(obj, "__dict__", None)
        if not isinstance(attrs, dict):
            continue
        for name, v in list(attrs.items()):
            if _is_dataset(v):
                todo.append(v)
                continue
            if isinstance(v, (list, tuple)) and v and len(v) <= MAX_DATASETS and all(_is_dataset(x) for x in v):
                todo.extend(v)
                continue
            try:
                s = _store(obj, name, v)
            except Exception:  # an attribute that cannot say its length or be indexed is not a plain store
                s = None
            if s:
                found.append(s)
    found.sort(key=lambda s: -s["bytes"])
    return found[:MAX_STORES]


def assign_site(cls: type, attr: str) -> dict[str, Any] | None:
    """``{"file", "line", "func"}`` of the statement in ``cls``'s methods that assigns ``self.<attr>``: a plain
    assignment in ``__init__`` first, then any in the class, then any store into it (``.append``, ``+=``); of
    several, the last (what the method leaves: an earlier ``self.x = []`` or ``None`` is a placeholder)."""
    best = None
    for code in storesite._class_codes(cls):
        lo, hi = storesite._code_range(code)
        for key, ln, prio, _written, func in storesite._index(code.co_filename):
            if key != ("attr", attr) or not lo <= ln <= hi:
                continue
            rank = (func != "__init__", prio != 2, -ln)
            if best is None or rank < best[0]:
                best = (rank, {"file": code.co_filename, "line": ln, "func": func})
    return best[1] if best else None
