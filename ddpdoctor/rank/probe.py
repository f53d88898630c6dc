"""Probes inside one rank: a collective ledger, DDP counters and a heartbeat thread.

The training thread keeps a few ints and the collective it is in, and writes one ledger line per
collective (one ``os.write``: a rank that aborts a moment later keeps its ledger); the heartbeat thread
writes the rest. The heartbeat thread was started before any collective, so it
can still read the main thread's stack (``sys._current_frames``) while that thread sits inside a
C++ collective with the GIL released.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
import types
from typing import Any

from ddpdoctor.record import schema
from ddpdoctor.record.writer import JsonlWriter, RingWriter
from ddpdoctor.rank import active, hooks, sites

# training frameworks whose layers a diagnosis names (imported by the time they init the process group)
FRAMEWORKS = ("lightning", "pytorch_lightning", "accelerate", "transformers", "deepspeed")


def _ring_size(env: str, configured: Any, default: int) -> int:
    """A ring size from the environment, else the manifest, else the default (at least 16)."""
    for v in (os.environ.get(env), configured):
        try:
            if v is not None:
                return max(16, int(v))
        except (TypeError, ValueError):
            pass
    return default


class Probe:
    def __init__(self, run_dir: str, rank: int, manifest: dict[str, Any]) -> None:
        self.run_dir = run_dir
        self.rank = rank
        d = os.path.join(run_dir, schema.RANKS_DIR, str(rank))
        os.makedirs(d, mode=0o700, exist_ok=True)
        self.dir = d
        self.events = JsonlWriter(os.path.join(d, schema.EVENTS))
        # bounded files (issue 10): the last LEDGER_RING..2x collectives (two lines each), HB_RING..2x beats
        ring = _ring_size("DDPDOCTOR_LEDGER_RING", manifest.get("ledger_ring"), schema.LEDGER_RING)
        self.hb = RingWriter(os.path.join(d, schema.HEARTBEAT),
                             _ring_size("DDPDOCTOR_HB_RING", manifest.get("hb_ring"), schema.HB_RING), shared=True)
        self.ledger = RingWriter(os.path.join(d, schema.LEDGER), 2 * ring)
        self.stacks = JsonlWriter(os.path.join(d, schema.STACKS))
        from ddpdoctor.rank.works import WorkTracker

        self.works = WorkTracker()   # Works of async collectives until they complete (heartbeat polls)
        self.interval = float(manifest.get("heartbeat_s", 0.25))
        self.monitor_pid = manifest.get("monitor_pid")
        self.monitor_ctime = manifest.get("monitor_create_time")
        self.control = os.path.join(run_dir, schema.CONTROL_DIR, schema.DUMP_REQUEST)
        self.main_ident = threading.get_ident()
        self.pending: list | None = None
        self.ncoll = 0
        self.ddp_fwd = 0
        self.counters = Counters(os.path.join(d, schema.COUNTERS))
        self.in_ddp_fwd = False
        import weakref

        self.ddp_models: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self.groups: dict[str, Any] = {}
        self.depth = 0
        self.timeline: Any = None     # ddpdoctor.rank.timeline.Timeline when the run is profiled
        # the rank probes the manifest asked for (rank/hooks.py), and their hooks as tuples of bound methods
        self.probes: list[hooks.RankProbe] = []
        self.fwd_before: tuple = ()
        self.fwd_after: tuple = ()
        self.opt_before: tuple = ()
        self.opt_after: tuple = ()
        self.dump_id = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self, **fields: Any) -> None:
        self.events.write(schema.K_START, self.rank, pid=os.getpid(), **fields)
        self._thread = threading.Thread(target=self._run, name="ddpdoctor-heartbeat", daemon=True)
        self._thread.start()

    def finish(self, code: int | str | None, **fields: Any) -> None:
        for fin in hooks.bound(self.probes, "finish"):
            fin()
        self.tick(final=True)
        self.events.write(schema.K_FINISH, self.rank, code=code, ddp_fwd=self.ddp_fwd, ncoll=self.ncoll,
                          seq=self.seqs(), **fields)

    # -- the heartbeat thread -----------------------------------------------------------------
    def _run(self) -> None:
        last_check = last_tick = 0.0
        while True:
            tl = self.timeline  # profile: sample the main thread's line every few ms between ticks
            if self._stop.wait(tl.period if tl is not None and tl.period > 0 else self.interval):
                break
            try:
                now = time.monotonic()
                if tl is not None and tl.period > 0:
                    try:
                        tl.sample()
                    except Exception:  # a sampling bug must not stop the heartbeats
                        pass
                    if now - last_tick < self.interval - tl.period / 2:
                        continue
                last_tick = now
                self.tick()
                if now - last_check > 1.0:
                    last_check = now
                    self._check_monitor()
            except Exception:  # never let a probe bug reach the user's job
                pass

    def seqs(self) -> dict[str, int]:
        out = {}
        for name, pg in list(self.groups.items()):
            try:
                out[name] = int(pg._get_sequence_number_for_group())
            except Exception:
                pass
        return out

    def tick(self, final: bool = False) -> None:
        frame = sys._current_frames().get(self.main_ident)
        pend = self.pending
        seq = self.seqs()
        pending = None
        if pend is not None:
            op, gname, _s0, shapes, dtypes, site, t0 = pend
            pending = {"op": op, "group": gname, "seq": seq.get(gname), "shapes": shapes, "dtypes": dtypes,
                       "site": site, "since": t0}
        try:
            awaiting = self.works.poll()
        except Exception:
            awaiting = None
        self.hb.write(schema.K_HB, self.rank, step=self.ddp_fwd, ncoll=self.ncoll, seq=seq, pending=pending,
                      awaiting=awaiting,
                      where=sites.user_site(frame), in_backward=sites.in_backward(frame) if frame else False,
                      in_ddp_forward=self.in_ddp_fwd, final=final or None, cpu=round(time.process_time(), 3))
        if self.timeline is not None:
            self.timeline.drain()
            self.timeline.sample_gpu()
        if not final:
            self._maybe_dump(frame)

    def _maybe_dump(self, frame: Any) -> None:
        try:
            with open(self.control, encoding="utf-8") as f:
                req = int(f.read().strip() or 0)
        except (OSError, ValueError):
            return
        if req > self.dump_id:
            self.dump_id = req
            self.dump(req)

    def dump(self, req: int) -> None:
        frames = sys._current_frames()
        names = {t.ident: t.name for t in threading.enumerate()}
        threads = [{"ident": ident, "name": names.get(ident, "?"), "main": ident == self.main_ident,
                    "stack": sites.stack_of(f)} for ident, f in frames.items()
                   if names.get(ident) != "ddpdoctor-heartbeat"]
        self.stacks.write(schema.K_STACKS, self.rank, request=req, threads=threads, fr=_flight_recorder_tail())

    def _check_monitor(self) -> None:
        """If ddpdoctor itself was killed, end this rank rather than leave an orphan."""
        if not self.monitor_pid:
            return
        try:
            import psutil

            p = psutil.Process(self.monitor_pid)
            alive = abs(p.create_time() - float(self.monitor_ctime or 0)) < 1.0 and p.status() != "zombie"
        except Exception:
            alive = False
        if not alive:
            self.events.write(schema.K_ORPHANED, self.rank, monitor_pid=self.monitor_pid)
            os.kill(os.getpid(), signal.SIGTERM)


def _flight_recorder_tail(n: int = 64) -> list[dict[str, Any]] | None:
    """The last collectives torch's own flight recorder saw (it includes DDP's C++ all-reduces)."""
    try:
        import json

        import torch._C._distributed_c10d as c10d

        data = json.loads(c10d._dump_fr_trace_json(True, False))
    except Exception:
        return None
    out = []
    for e in data.get("entries", [])[-n:]:
        out.append({"op": str(e.get("profiling_name", "")).split(":")[-1], "pg": (e.get("process_group") or [""])[-1],
                    "seq": e.get("collective_seq_id"), "p2p": e.get("is_p2p"), "sizes": e.get("input_sizes"),
                    "dtypes": e.get("input_dtypes"), "state": e.get("state")})
    return out


class Counters:
    """Counts kept in a shared memory map of a small JSON file: the training thread updates them in
    well under a microsecond, and they survive a rank that aborts (the page cache keeps them)."""

    _TEMPLATE = b'{"v":1,"kind":"%s","ddp_fwd":%%12d}\n' % schema.K_COUNTERS.encode()

    def __init__(self, path: str) -> None:
        import mmap

        self.mm = None
        try:
            data = self._TEMPLATE % 0
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            os.write(fd, data)
            self.mm = mmap.mmap(fd, len(data))
            os.close(fd)
            self._fwd_at = data.index(b'"ddp_fwd":') + len(b'"ddp_fwd":')
        except (OSError, ValueError):
            self.mm = None

    def set_ddp_fwd(self, n: int) -> None:
        if self.mm is not None:
            self.mm[self._fwd_at:self._fwd_at + 12] = b"%12d" % n


# -- wrappers ---------------------------------------------------------------------------------------

def install(probe: Probe, manifest: dict[str, Any] | None = None) -> None:
    """Wrap the public collectives, init_process_group, DDP.forward and DataLoader.__iter__; add the
    probes the run asked for in its manifest. Idempotent."""
    active.probe = probe
    import torch.distributed as dist

    from ddpdoctor.rank import collectives

    probe.probes = hooks.install_all(probe, manifest or {})
    probe.fwd_before = hooks.bound(probe.probes, "on_forward")
    probe.fwd_after = hooks.bound(probe.probes, "after_forward")
    probe.opt_before = hooks.bound(probe.probes, "on_optimizer_step")
    probe.opt_after = hooks.bound(probe.probes, "after_optimizer_step")
    if probe.opt_before or probe.opt_after:
        _install_optimizer_hooks()

    sites.reset_prefixes()
    collectives.install(dist)

    init = dist.init_process_group
    if not hasattr(init, "__ddpdoctor_wrapped__"):
        @functools.wraps(init)
        def init_process_group(*args: Any, **kwargs: Any) -> Any:
            out = init(*args, **kwargs)
            p = active.probe
            if p is not None:
                try:
                    pg = dist.distributed_c10d._get_default_group()
                    p.groups[getattr(pg, "group_name", None) or "default"] = pg
                    p.events.write(schema.K_INIT, p.rank, global_rank=dist.get_rank(), world_size=dist.get_world_size(),
                                   backend=str(dist.get_backend()), site=sites.user_site(sys._getframe(1)),
                                   frameworks=[m for m in FRAMEWORKS if m in sys.modules])
                except Exception:
                    pass
            return out

        init_process_group.__ddpdoctor_wrapped__ = init  # type: ignore[attr-defined]
        dist.init_process_group = init_process_group

    from torch.nn.parallel import DistributedDataParallel as DDP

    fwd = DDP.forward
    if not hasattr(fwd, "__ddpdoctor_wrapped__"):
        @functools.wraps(fwd)
        def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
            p = active.probe
            if p is None:
                return fwd(self, *args, **kwargs)
            p.ddp_fwd += 1
            if p.ddp_fwd <= 4:   # the user's modules inside DDP: roots of memleak's holder search
                p.ddp_models.add(self)
            p.counters.set_ddp_fwd(p.ddp_fwd)
            if p.fwd_before:     # the rank probes' hooks (rank/hooks.py); a probe bug never reaches the script
                try:
                    for h in p.fwd_before:
                        h(self)
                except Exception:
                    pass
            p.in_ddp_fwd = True
            try:
                return fwd(self, *args, **kwargs)
            finally:
                p.in_ddp_fwd = False
                if p.fwd_after:
                    try:
                        for h in p.fwd_after:
                            h(self)
                    except Exception:
                        pass

        forward.__ddpdoctor_wrapped__ = fwd  # type: ignore[attr-defined]
        DDP.forward = forward

    # model.join() and Join([model]) both ask DDP for its join hook: uneven inputs handled on purpose
    join_hook = DDP.join_hook
    if not hasattr(join_hook, "__ddpdoctor_wrapped__"):
        @functools.wraps(join_hook)
        def ddp_join_hook(self: Any, *args: Any, **kwargs: Any) -> Any:
            p = active.probe
            if p is not None:
                p.events.write(schema.K_JOIN, p.rank, site=sites.user_site(sys._getframe(1)))
            return join_hook(self, *args, **kwargs)

        ddp_join_hook.__ddpdoctor_wrapped__ = join_hook  # type: ignore[attr-defined]
        DDP.join_hook = ddp_join_hook

    from torch.utils.data import DataLoader

    it = DataLoader.__iter__
    if not hasattr(it, "__ddpdoctor_wrapped__"):
        @functools.wraps(it)
        def __iter__(self: Any) -> Any:
            p = active.probe
            if p is not None and threading.get_ident() == p.main_ident:
                try:
                    n = len(self)
                except Exception:
                    n = None
                sampler = getattr(self, "batch_sampler", None)  # not `or`: bool() calls a sampler's len()
                if sampler is None:
                    sampler = getattr(self, "sampler", None)
                inner = getattr(sampler, "sampler", sampler)  # BatchSampler(sampler) -> the sampler
                p.events.write(schema.K_DATALOADER, p.rank, len=n, site=sites.user_site(sys._getframe(1)),
                               sampler=type(inner).__name__ if inner is not None else None)
            return it(self)

        __iter__.__ddpdoctor_wrapped__ = it  # type: ignore[attr-defined]
        DataLoader.__iter__ = __iter__

    rebind_user_imports(dist)


def _install_optimizer_hooks() -> None:
    """One pair of torch's global optimizer-step hooks that call the probes' hooks (main thread only)."""
    global _opt_hooks
    if _opt_hooks:
        return
    _opt_hooks = True
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    def pre(opt: Any, _a: Any, _k: Any) -> None:
        p = active.probe
        if p is not None and threading.get_ident() == p.main_ident:
            try:
                for h in p.opt_before:
                    h(opt)
            except Exception:  # a probe bug never reaches the script's optimizer step
                pass

    def post(opt: Any, _a: Any, _k: Any) -> None:
        p = active.probe
        if p is not None and threading.get_ident() == p.main_ident:
            try:
                for h in p.opt_after:
                    h(opt)
            except Exception:  # a probe bug never reaches the script's optimizer step
                pass

    register_optimizer_step_pre_hook(pre)
    register_optimizer_step_post_hook(post)


_opt_hooks = False


def rebind_user_imports(dist: Any, namespaces: tuple[dict, ...] = ()) -> None:
    """``from torch.distributed import init_process_group, all_reduce`` in a module imported before the probes
    were installed (an mp.spawn child unpickles its target, importing the script first) holds the unwrapped
    functions: point those names at the wrappers, in the user's modules and in ``namespaces`` (the globals
    of the spawn target: multiprocessing runs the script with runpy, whose functions keep a copy of the
    module's dict)."""
    wrapped = {}
    for fn in list(vars(dist).values()):
        # plain functions only: touching other attributes (the deprecated ``reduce_op``) would print a
        # FutureWarning into the user's stderr
        if type(fn) is types.FunctionType:   # not isinstance: that asks the object for __class__
            orig = fn.__dict__.get("__ddpdoctor_wrapped__")
            if orig is not None:
                wrapped[id(orig)] = fn
    spaces = [vars(m) for m in list(sys.modules.values())
              if getattr(m, "__file__", None) and sites.is_user_file(m.__file__)] + list(namespaces)
    for ns in spaces:
        for name, val in list(ns.items()):
            w = wrapped.get(id(val))
            if w is not None:
                ns[name] = w
