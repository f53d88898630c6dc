"""Ranges for ``ddpdoctor profile``: step, forward, backward, optimizer step, each collective, each DDP
bucket all-reduce (enqueue to completion), DataLoader wait.

Each range is kept for ddpdoctor's own timeline (written in batches by the heartbeat thread) and, when an
NVTX tool is attached (``NVTX_INJECTION64_PATH`` is set, as nsys does), emitted as an NVTX start/end
range in the ``ddpdoctor`` domain with a category (compute, comm, data, optim). Start/end ranges, not
push/pop: backward and the all-reduces finish on other threads. With no tool attached no NVTX call is
made at all.

**Where the time goes.** The heartbeat thread (already running, see probe.py) also samples the main thread's
innermost user line (``sys._current_frames``; one dict lookup per frame thanks to the file cache in sites.py)
every 10 ms, every 20, 40 ... 100 ms once 4000, 8000 ... samples are in, and counts it per phase: data,
forward, backward, optimizer, collective (a Python collective in flight), or "other" tagged with the phase
range that ended last ("other:forward" is the time between forward and backward). The histogram is bounded (``MAX_KEYS`` lines; the rest counts as unknown) and
written as deltas (``samples`` records) at growing intervals, so a long run writes little. The analysis turns
counts into ms per step with the phase medians of the timeline.
"""

from __future__ import annotations

import collections
import functools
import linecache
import os
import sys
import threading
import time
from typing import Any

from ddpdoctor.rank import sites
from ddpdoctor.record import schema
from ddpdoctor.record.writer import JsonlWriter

CATEGORIES = ("compute", "comm", "data", "optim")
SAMPLE_MS = 10.0     # main-thread stack sample period (0 turns sampling off) ...
SLOWDOWN_AFTER = 4000  # ... doubled each time the sample count doubles past this, up to MAX_SAMPLE_MS
MAX_SAMPLE_MS = 100.0
MAX_KEYS = 512       # distinct (phase, line) keys kept per rank; later new keys count as unknown


def tool_attached() -> bool:
    return bool(os.environ.get("NVTX_INJECTION64_PATH") or os.environ.get("NVTX_INJECTION32_PATH"))


class Timeline:
    def __init__(self, probe: Any) -> None:
        self.p = probe
        self.w = JsonlWriter(os.path.join(probe.dir, schema.TIMELINE))
        self.buf: collections.deque = collections.deque()
        self.dom: Any = None
        self.attrs: dict[tuple, Any] = {}
        if tool_attached():
            try:
                import nvtx

                self.dom = nvtx.get_domain("ddpdoctor")
            except Exception:
                self.dom = None
        self.step = 0
        self.step_t0 = time.perf_counter_ns()
        self.step_rid = self._nvtx_start("step", None, 0)
        self.accum = 0
        self.amp = False
        self.buckets: list[int] = []
        self.bucket_cap_mb = 0.0
        self.gpu: Any = None
        self.main_tid = threading.get_native_id()
        # the phase the main thread is in; "other:<range>" after a range ended (set by the wrappers below)
        self.phase = "other:"
        self.period = SAMPLE_MS / 1000.0
        self.slowdown_at = SLOWDOWN_AFTER
        self.counts: dict[tuple, int] = {}
        self.flushed: dict[tuple, int] = {}
        self.n_samples = 0
        self.first_sampled_step: int | None = None
        self.next_flush = time.monotonic() + 1.0
        self.flush_every = 1.0
        self.texts: set[tuple] = set()
        self.flush_lock = threading.Lock()

    # a range is (name, category, thread id, start ns, end ns, payload)
    def _nvtx_start(self, name: str, cat: str | None, payload: int | None) -> Any:
        if self.dom is None:
            return None
        key = (name, cat)
        a = self.attrs.get(key)
        if a is None:
            a = self.attrs[key] = self.dom.get_event_attributes(message=name, category=cat)
        if payload is not None:
            a = self.dom.get_event_attributes(message=name, category=cat, payload=payload)
        return self.dom.start_range(a)

    def _nvtx_end(self, rid: Any) -> None:
        if rid is not None and self.dom is not None:
            self.dom.end_range(rid)

    def start(self, name: str, cat: str | None, payload: int | None = None) -> tuple:
        return (name, cat, threading.get_native_id(), time.perf_counter_ns(), payload,
                self._nvtx_start(name, cat, payload))

    def end(self, token: tuple) -> None:
        name, cat, tid, t0, payload, rid = token
        self._nvtx_end(rid)
        self.buf.append((name, cat, tid, t0, time.perf_counter_ns(), payload))

    def on_opt_step_end(self) -> None:
        now = time.perf_counter_ns()
        self._nvtx_end(self.step_rid)
        self.buf.append(("step", None, threading.get_native_id(), self.step_t0, now, self.step))
        self.step += 1
        self.step_t0 = now
        self.step_rid = self._nvtx_start("step", None, self.step)

    # -- where the time goes: main-thread samples (heartbeat thread) --------------------------------
    def sample(self) -> None:
        """Count the main thread's innermost user line (and the user line that called it) in its phase.
        Runs on the heartbeat thread; the first step (warm-up) is not sampled."""
        if self.step < 1:
            return
        f = sys._current_frames().get(self.p.main_ident)
        phase = self.phase
        if phase.startswith("other") and self.p.pending is not None:
            phase = "collective"
        site = caller = None
        is_user = sites.is_user_file
        while f is not None:
            code = f.f_code
            if is_user(code.co_filename):
                if site is None:
                    site = (code.co_filename, f.f_lineno, code.co_name)
                else:
                    caller = (code.co_filename, f.f_lineno)
                    break
            f = f.f_back
        f = None
        key = (phase, site, caller)
        n = self.counts.get(key)
        if n is None and len(self.counts) >= MAX_KEYS:
            key = (phase, None, None)
            n = self.counts.get(key)
        self.counts[key] = (n or 0) + 1
        self.n_samples += 1
        if self.first_sampled_step is None:
            self.first_sampled_step = self.step
        if self.n_samples >= self.slowdown_at:  # enough for the shares: a long run samples less and less
            self.slowdown_at *= 2
            self.period = min(MAX_SAMPLE_MS / 1000.0, self.period * 2)

    def flush_samples(self, force: bool = False) -> None:
        """Write the counts added since the last flush (heartbeat thread; at 1, 2, 4 ... 30 s, and at the end)."""
        now = time.monotonic()
        if not force and now < self.next_flush:
            return
        with self.flush_lock:  # the heartbeat thread and finish() on the main thread
            self._flush_samples(now)

    def _flush_samples(self, now: float) -> None:
        self.flush_every = min(30.0, self.flush_every * 2)
        self.next_flush = now + self.flush_every
        rows = []
        for key, n in list(self.counts.items()):
            d = n - self.flushed.get(key, 0)
            if d <= 0:
                continue
            self.flushed[key] = n
            phase, site, caller = key
            if site is None:
                rows.append([phase, None, None, None, None, None, d, None])
                continue
            text = linecache.getline(site[0], site[1]).strip()[:120] if key not in self.texts else None
            self.texts.add(key)
            rows.append([phase, site[0], site[1], site[2], caller[0] if caller else None,
                         caller[1] if caller else None, d, text])
        if rows:
            self.w.write("samples", self.p.rank, period_s=self.period, step=self.step,
                         first_step=self.first_sampled_step, rows=rows)

    def sample_gpu(self) -> None:
        """GPU utilisation through NVML, where this rank uses a GPU (heartbeat thread)."""
        import sys

        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return
        try:
            import pynvml

            if self.gpu is None:
                pynvml.nvmlInit()
                self.gpu = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
            u = pynvml.nvmlDeviceGetUtilizationRates(self.gpu)
            self.w.write(schema.K_GPU, self.p.rank, util=int(u.gpu), mem_util=int(u.memory))
        except Exception:
            pass

    def finish(self) -> None:
        self.drain()
        self.flush_samples(force=True)
        self.w.write("profile_info", self.p.rank, main_tid=self.main_tid, steps=self.step, forwards=self.accum, amp=self.amp,
                     buckets=self.buckets, bucket_cap_mb=self.bucket_cap_mb, nvtx=self.dom is not None,
                     samples=self.n_samples, sample_ms=self.period * 1000.0)

    def drain(self) -> None:
        while self.buf:
            name, cat, tid, t0, t1, payload = self.buf.popleft()
            self.w.write(schema.K_RANGE, self.p.rank, name=name, cat=cat, tid=tid, t0=t0, t1=t1, payload=payload)
        if self.period > 0:
            self.flush_samples()


def install(probe: Any, opts: Any = None) -> Timeline:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
    from torch.utils.data import dataloader as dl

    tl = Timeline(probe)
    if isinstance(opts, dict) and opts.get("sample_ms") is not None:
        tl.period = max(0.0, float(opts["sample_ms"])) / 1000.0
    probe.timeline = tl
    main = probe.main_ident
    opt_tok: dict[str, Any] = {}

    def pre(_o: Any, _a: Any, _k: Any) -> None:
        if threading.get_ident() == main:
            opt_tok["t"] = tl.start("optimizer step", "optim")
            tl.phase = "optimizer"

    def post(_o: Any, _a: Any, _k: Any) -> None:
        if threading.get_ident() == main and "t" in opt_tok:
            tl.end(opt_tok.pop("t"))
            tl.phase = "other:optimizer"
            tl.on_opt_step_end()

    register_optimizer_step_pre_hook(pre)
    register_optimizer_step_post_hook(post)

    # backward: wraps torch.autograd.backward (Tensor.backward calls it); ends after DDP's final
    # callback has waited for the last bucket's all-reduce, whatever thread ran the graph
    back = torch.autograd.backward

    @functools.wraps(back)
    def backward(*args: Any, **kwargs: Any) -> Any:
        tok = tl.start("backward", "compute")
        on_main = threading.get_ident() == main
        if on_main:
            tl.phase = "backward"
        try:
            return back(*args, **kwargs)
        finally:
            tl.end(tok)
            if on_main:
                tl.phase = "other:backward"

    torch.autograd.backward = backward

    nxt = dl._BaseDataLoaderIter.__next__

    @functools.wraps(nxt)
    def __next__(self: Any) -> Any:
        tok = tl.start("dataloader wait", "data")
        on_main = threading.get_ident() == main
        if on_main:
            prev, tl.phase = tl.phase, "data"
        try:
            return nxt(self)
        finally:
            tl.end(tok)
            if on_main:
                tl.phase = "other:data" if prev.startswith("other") else prev

    dl._BaseDataLoaderIter.__next__ = __next__

    # installed before the hang probes' own DDP.forward wrapper, which then wraps this one: this wrapper
    # must not carry their __ddpdoctor_wrapped__ mark, or they would skip theirs (no DDP step counts)
    fwd = DDP.forward
    if getattr(fwd, "__ddpdoctor_timeline__", False):
        return tl

    @functools.wraps(fwd)
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() != main:
            return fwd(self, *args, **kwargs)
        tl.accum += 1
        tl.amp = tl.amp or torch.is_autocast_enabled()
        _ensure_bucket_hook(self, tl)
        tok = tl.start("forward", "compute")
        prev, tl.phase = tl.phase, "forward"
        try:
            return fwd(self, *args, **kwargs)
        finally:
            tl.end(tok)
            tl.phase = "other:forward" if prev.startswith("other") else prev

    forward.__ddpdoctor_timeline__ = True  # type: ignore[attr-defined]
    DDP.forward = forward

    reg = DDP.register_comm_hook

    @functools.wraps(reg)
    def register_comm_hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        self._ddpdoctor_user_hook = True  # the script's own hook wins; ours is not installed
        return reg(self, *args, **kwargs)

    DDP.register_comm_hook = register_comm_hook
    return tl


def _ensure_bucket_hook(model: Any, tl: Timeline) -> None:
    """A comm hook equal to DDP's default all-reduce that records each bucket from enqueue to completion.
    Installed at the first forward, unless the script registered a hook of its own."""
    if getattr(model, "_ddpdoctor_hook", False) or getattr(model, "_ddpdoctor_user_hook", False):
        return
    model._ddpdoctor_hook = True
    try:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        pg = model.process_group
        world = dist.get_world_size(pg)
        raw_all_reduce = getattr(dist.all_reduce, "__ddpdoctor_wrapped__", dist.all_reduce)  # not a user call
        sizes: list[int] = []
        tl.buckets = sizes
        tl.bucket_cap_mb = getattr(model, "bucket_bytes_cap", 0) / 2**20

        def hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP rejects other annotations
            buf = bucket.buffer()
            idx = bucket.index()
            while len(sizes) <= idx:
                sizes.append(0)
            sizes[idx] = buf.numel() * buf.element_size()
            tok = tl.start(f"all_reduce bucket {idx}", "comm", idx)
            fut = raw_all_reduce(buf.div_(world), group=pg, async_op=True).get_future()

            def done(f):  # type: ignore[no-untyped-def]
                tl.end(tok)
                return f.value()[0]

            return fut.then(done)

        DDP.register_comm_hook.__wrapped__(model, None, hook)  # type: ignore[attr-defined]
    except Exception:
        pass
