"""Ranges for ``ddpdoctor profile``: step, forward, backward, optimizer step, each collective, each DDP
bucket all-reduce (enqueue to completion), DataLoader wait.

Each range is kept for ddpdoctor's own timeline (written in batches by the heartbeat thread) and, when an
NVTX tool is attached (``NVTX_INJECTION64_PATH`` is set, as nsys does), emitted as an NVTX start/end
range in the ``ddpdoctor`` domain with a category (compute, comm, data, optim). Start/end ranges, not
push/pop: backward and the all-reduces finish on other threads. With no tool attached no NVTX call is
made at all.
"""

from __future__ import annotations

import collections
import functools
import os
import threading
import time
from typing import Any

from ddpdoctor.record import schema
from ddpdoctor.record.writer import JsonlWriter

CATEGORIES = ("compute", "comm", "data", "optim")


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
        self.w.write("profile_info", self.p.rank, main_tid=self.main_tid, steps=self.step, forwards=self.accum, amp=self.amp,
                     buckets=self.buckets, bucket_cap_mb=self.bucket_cap_mb, nvtx=self.dom is not None)

    def drain(self) -> None:
        while self.buf:
            name, cat, tid, t0, t1, payload = self.buf.popleft()
            self.w.write(schema.K_RANGE, self.p.rank, name=name, cat=cat, tid=tid, t0=t0, t1=t1, payload=payload)


def install(probe: Any) -> Timeline:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
    from torch.utils.data import dataloader as dl

    tl = Timeline(probe)
    probe.timeline = tl
    main = probe.main_ident
    opt_tok: dict[str, Any] = {}

    def pre(_o: Any, _a: Any, _k: Any) -> None:
        if threading.get_ident() == main:
            opt_tok["t"] = tl.start("optimizer step", "optim")

    def post(_o: Any, _a: Any, _k: Any) -> None:
        if threading.get_ident() == main and "t" in opt_tok:
            tl.end(opt_tok.pop("t"))
            tl.on_opt_step_end()

    register_optimizer_step_pre_hook(pre)
    register_optimizer_step_post_hook(post)

    # backward: wraps torch.autograd.backward (Tensor.backward calls it); ends after DDP's final
    # callback has waited for the last bucket's all-reduce, whatever thread ran the graph
    back = torch.autograd.backward

    @functools.wraps(back)
    def backward(*args: Any, **kwargs: Any) -> Any:
        tok = tl.start("backward", "compute")
        try:
            return back(*args, **kwargs)
        finally:
            tl.end(tok)

    torch.autograd.backward = backward

    nxt = dl._BaseDataLoaderIter.__next__

    @functools.wraps(nxt)
    def __next__(self: Any) -> Any:
        tok = tl.start("dataloader wait", "data")
        try:
            return nxt(self)
        finally:
            tl.end(tok)

    dl._BaseDataLoaderIter.__next__ = __next__

    fwd = DDP.forward  # already wrapped by the hang probes; wrap once more for the range

    @functools.wraps(fwd)
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() != main:
            return fwd(self, *args, **kwargs)
        tl.accum += 1
        tl.amp = tl.amp or torch.is_autocast_enabled()
        _ensure_bucket_hook(self, tl)
        tok = tl.start("forward", "compute")
        try:
            return fwd(self, *args, **kwargs)
        finally:
            tl.end(tok)

    forward.__ddpdoctor_wrapped__ = fwd  # type: ignore[attr-defined]
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
