"""Ranges for ``ddpdoctor profile``: step, forward, backward, optimizer step, each collective, DataLoader
wait, and with ``--bucket-ranges`` (or an NVTX tool attached) each DDP bucket all-reduce (enqueue to
completion, through a Python comm hook: ~0.1-0.2 ms a step, issue 10). Without it the buckets' sizes and
the backward's comm and overlap times come from DDP's own logger (``ddp_stats``), which costs nothing.

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
written as deltas (``samples`` records) at growing intervals, so a long run writes little (``linesamples.py``). The analysis turns
counts into ms per step with the phase medians of the timeline.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import sys
import threading
import time
import weakref
from typing import Any

from ddpdoctor.rank import failures, nvml
from ddpdoctor.rank.hooks import RankProbe
from ddpdoctor.rank.probes.profile.buckets import ensure_bucket_hook
from ddpdoctor.rank.probes.profile.linesamples import LineSamples
from ddpdoctor.record import schema
from ddpdoctor.record.writer import JsonlWriter

_now_ns = time.perf_counter_ns
_here = threading.local()


def _native_id() -> int:
    """This thread's kernel id, kept per thread: ``threading.get_native_id`` is a ``gettid`` system call
    every time (three a step here), and on a loaded host every system call on the training thread's path
    is a point where the scheduler may run another thread first."""
    try:
        return _here.tid  # type: ignore[no-any-return]
    except AttributeError:
        _here.tid = tid = threading.get_native_id()
        return tid


CATEGORIES = ("compute", "comm", "data", "optim")
INFO_STEPS = frozenset(2**k for k in range(9))  # optimizer steps after which profile_info is written
FULL_STEPS = 1000  # every step's ranges are kept up to this step; then blocks of BLOCK consecutive steps,
BLOCK = 10  # one block in 10 up to step 10,000, one in 100 up to 100,000 ...: about 1,000 steps
# kept per decade of steps, so a day of training keeps a few MB of ranges (issue 10)


def keep_step(n: int) -> bool:
    """Are the ranges of optimizer step ``n`` kept in ddpdoctor's own timeline? The same steps on every
    rank (the ranks' phases are compared step by step); NVTX ranges are emitted for every step."""
    if n < FULL_STEPS:
        return True
    every = 10 ** (len(str(n)) - len(str(FULL_STEPS)) + 1)
    return (n // BLOCK) % every == 0


def _is_ddp(model: Any) -> bool:
    """A DDP model (its logger's data): a root forward may be an FSDP root's (rank/steps.py)."""
    return hasattr(model, "_get_ddp_logging_data")


def tool_attached() -> bool:
    return bool(os.environ.get("NVTX_INJECTION64_PATH") or os.environ.get("NVTX_INJECTION32_PATH"))


class Timeline(LineSamples, RankProbe):
    """The profile probe of one rank: ranges in a buffer the heartbeat thread drains, phases for the samples."""

    family = "profile"
    records = "step and phase ranges, line samples and DDP's timers (the step breakdown may be partial)"

    def __init__(self, probe: Any) -> None:
        self.p = probe
        self.w = JsonlWriter(os.path.join(probe.dir, schema.TIMELINE))
        self.buf: collections.deque = collections.deque()
        self.dom: Any = None
        self.attrs: dict[tuple, Any] = {}
        self.names: dict[Any, str] = {}  # JSON text of range names and categories
        if tool_attached():
            try:
                import nvtx

                self.dom = nvtx.get_domain("ddpdoctor")
            except Exception:
                self.dom = None
        self.step = 0
        self.keep = True  # this step's ranges go to the timeline (keep_step)
        self.kept_steps = 0
        self.in_opt = False
        self.step_t0 = time.perf_counter_ns()
        self.step_rid = self._nvtx_start("step", None, 0)
        self.accum = 0
        self.amp = False
        self.buckets: list[int] = []
        self.bucket_cap_mb = 0.0
        self.main_tid = threading.get_native_id()
        # the phase the main thread is in; "other:<range>" after a range ended (set by the hooks and wrappers)
        self.phase = "other:"
        self.main_ident = probe.main_ident
        self.fwd_stack: list[tuple[tuple, str]] = []  # (token, phase before) of the DDP forwards in progress
        self.opt_tok: tuple | None = None
        self._autocast: Any = lambda: False  # torch.is_autocast_enabled, set by install
        self.bucket_ranges = False  # a timing comm hook per DDP model (--bucket-ranges, --nsys)
        self.model_ref: Any = None  # weakref of the first DDP model: its own timers (ddp_stats)
        self.fsdp_ref: Any = None  # weakref of the first FSDP2 or FSDP1 root: its sharding (fsdp_info)
        self.fsdp_read: dict[str, Any] | None = None  # an FSDP1 root's sharding, read once (fsdp_info)
        self.ddp: dict[str, Any] = {}  # what DDP's logger said last
        # samples per optimizer step (the leading size of each DDP.forward's first tensor, micro-batches
        # summed): what `profile --scaling` counts as throughput; step samples -> steps. Only its runs count
        # (a forward pre-hook on the DDP model: a script that copies or pickles its DDP object would carry it)
        self.count_samples = False
        self.step_samples = 0
        self.samples_per_step: collections.Counter = collections.Counter()
        self.comm_hook: str | None = None  # a tune arm's compression hook (knobs.py), registered at the first forward
        self.init_samples()

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

    def start(self, name: str, cat: str | None, payload: int | None = None) -> tuple | None:
        """A range's token; None when neither the timeline (a step not kept) nor NVTX wants it."""
        if self.dom is None:
            if not self.keep:
                return None
            return (name, cat, _native_id(), _now_ns(), payload, None, True)
        return (name, cat, _native_id(), _now_ns(), payload, self._nvtx_start(name, cat, payload), self.keep)

    def end(self, token: tuple | None) -> None:
        if token is None:
            return
        if token[5] is not None:
            self._nvtx_end(token[5])
        if token[6]:
            self.buf.append((token[0], token[1], token[2], token[3], _now_ns(), token[4]))

    def on_opt_step_end(self) -> None:
        now = _now_ns()
        self._nvtx_end(self.step_rid)
        if self.keep:
            self.buf.append(("step", None, _native_id(), self.step_t0, now, self.step))
            self.kept_steps += 1
        self.step += 1
        if len(self.samples_per_step) < 64 or self.step_samples in self.samples_per_step:
            self.samples_per_step[self.step_samples] += 1
        self.step_samples = 0
        self.keep = keep_step(self.step)
        self.step_t0 = now
        self.step_rid = self._nvtx_start("step", None, self.step)

    # -- the protocol (rank/hooks.py) ------------------------------------------------------------------
    def on_forward(self, model: Any) -> None:
        if threading.get_ident() != self.main_ident:
            return
        self.accum += 1
        self.amp = self.amp or self._autocast()
        if self.model_ref is None:
            if _is_ddp(model):
                self.model_ref = weakref.ref(model)
                self._first_model(model)
            elif self.fsdp_ref is None and _fsdp_kind(model):
                self.fsdp_ref = weakref.ref(model)
        if self.bucket_ranges and _is_ddp(model):
            ensure_bucket_hook(model, self)
        self.fwd_stack.append((self.start("forward", "compute"), self.phase))
        self.phase = "forward"

    def _first_model(self, model: Any) -> None:
        """The first DDP model: its timers on every iteration (DDP's default is iterations 1-10 and every
        100th: ``_set_ddp_runtime_logging_sample_rate``, torch/nn/parallel/distributed.py), and in the runs of
        ``profile --scaling`` a forward pre-hook that counts the samples of each forward."""
        try:
            if hasattr(model, "_set_ddp_runtime_logging_sample_rate"):  # every DDP has it (torch >= 1.9)
                model._set_ddp_runtime_logging_sample_rate(1)
        except Exception as e:
            failures.report(self.p, "profile DDP timers", "DDP's backward timers on every iteration", e)
        try:
            if self.count_samples:
                model.register_forward_pre_hook(self._count_samples, with_kwargs=True)
        except Exception as e:
            failures.report(self.p, "profile sample count", "the samples per step (profile --scaling)", e)
        if self.comm_hook and _is_ddp(model):
            from ddpdoctor.rank.probes.profile import knobs

            try:
                knobs.register_hook(self, model)
            except Exception as e:
                failures.report(self.p, "tune comm hook", "the arm's compression hook (this arm ran without it)", e)

    def _count_samples(self, _module: Any, args: tuple, kwargs: dict) -> None:
        """The leading size of the forward's first tensor argument (a batch's samples), added to the step's."""
        if threading.get_ident() != self.main_ident:
            return
        for a in (*args, *kwargs.values()):
            shape = getattr(a, "shape", None)
            if shape is not None and len(shape) >= 1:
                self.step_samples += int(shape[0])
                return

    def after_forward(self, model: Any) -> None:
        if threading.get_ident() != self.main_ident or not self.fwd_stack:
            return
        tok, prev = self.fwd_stack.pop()
        self.end(tok)
        self.phase = "other:forward" if prev.startswith("other") else prev

    def on_optimizer_step(self, opt: Any) -> None:
        self.opt_tok = self.start("optimizer step", "optim")
        self.in_opt = True
        self.phase = "optimizer"

    def after_optimizer_step(self, opt: Any) -> None:
        if self.in_opt:
            self.end(self.opt_tok)
            self.opt_tok = None
            self.in_opt = False
            self.phase = "other:optimizer"

    def after_step(self, n: int) -> None:
        """A training step ended (rank/steps.py): its range closes, the next one opens."""
        self.on_opt_step_end()
        if self.step in INFO_STEPS or self.step % 500 == 0:
            self.ddp_stats()
            self.write_info()

    def ddp_stats(self) -> None:
        """Buckets and backward timings from DDP's own logger (C++ timers it samples at iterations 1-10 and
        every 100th; read on the main thread, where the reducer writes them): no comm hook needed."""
        model = self.model_ref() if self.model_ref is not None else None
        if model is None:
            return
        try:
            d = model._get_ddp_logging_data()
        except Exception as e:
            failures.report(
                self.p,
                "profile DDP timers",
                "DDP's bucket sizes and backward timers (compute vs gradient all-reduce)",
                e,
            )
            return
        sizes = d.get("rebuilt_bucket_sizes") if d.get("has_rebuilt_buckets") else d.get("bucket_sizes")
        try:
            buckets = [int(x) for x in str(sizes or "").split(",") if x.strip()]
        except ValueError:
            buckets = []
        out: dict[str, Any] = {
            "buckets": buckets,
            "bucket_cap_mb": round(int(d.get("bucket_cap_bytes") or 0) / 2**20, 3),
        }
        for key, name in (
            ("avg_backward_compute_time", "backward_ms"),
            ("avg_backward_comm_time", "comm_ms"),
            ("avg_backward_compute_comm_overlap_time", "overlap_ms"),
            ("avg_forward_compute_time", "forward_ms"),
        ):
            v = d.get(key)
            if isinstance(v, int) and v > 0:
                out[name] = round(v / 1e6, 3)
        self.ddp = out

    def fsdp_info(self) -> dict[str, Any]:
        """The first FSDP root's sharding (read on the main thread, from FSDP's own state); {} for a job
        without FSDP. FSDP2: its modules' mesh, reshard_after_forward, mixed precision and sharded
        parameters, read at each ``write_info``. FSDP1: its strategy, wrapped modules, mixed precision,
        ``use_orig_params``, CPU offload and sharded bytes, read once after the first step (FSDP1's lazy init
        has run by then; none of it changes afterwards)."""
        if self.fsdp_read is not None:
            return self.fsdp_read
        model = self.fsdp_ref() if self.fsdp_ref is not None else None
        if model is None:
            return {}
        kind = _fsdp_kind(model)
        try:
            if kind == "FSDP1":
                out = fsdp1_sharding(model)
                if self.step >= 1:
                    self.fsdp_read = out
                return out
            return fsdp_sharding(model)
        except Exception as e:
            failures.report(self.p, f"profile {kind} sharding", f"the {kind} sharding in the summary", e)
            self.fsdp_ref = None
            return {}

    def write_info(self) -> None:
        """The run's profile facts so far (steps, forwards, AMP, buckets, DDP's timers, sampling): written
        at steps 1, 2, 4 ... 256, every 500th and at the end, so a rank ended by --steps still has them."""
        ddp = dict(self.ddp)
        # DDP's logger first; the comm hook's own count where the logger said nothing
        buckets = ddp.pop("buckets", None) or list(self.buckets)
        cap = ddp.pop("bucket_cap_mb", None) or self.bucket_cap_mb
        self.w.write(
            schema.K_PROFILE_INFO,
            self.p.rank,
            main_tid=self.main_tid,
            steps=self.step,
            kept_steps=self.kept_steps,
            forwards=self.accum,
            amp=self.amp,
            buckets=buckets,
            bucket_cap_mb=cap,
            ddp=ddp,
            bucket_ranges=self.bucket_ranges,
            nvtx=self.dom is not None,
            samples=self.n_samples,
            sample_ms=self.period * 1000.0,
            step_samples={str(k): v for k, v in self.samples_per_step.items()},
            fsdp=self.fsdp_info() or None,
        )

    def on_tick(self) -> None:
        """After each heartbeat (heartbeat thread): write the ranges ended since, sample GPU utilisation."""
        self.drain()
        self.sample_gpu()

    def sample_gpu(self) -> None:
        """GPU utilisation through NVML, where this rank uses a GPU (heartbeat thread)."""
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return
        try:
            import pynvml

            u = pynvml.nvmlDeviceGetUtilizationRates(nvml.handle(torch.cuda.current_device()))
            self.w.write(schema.K_GPU, self.p.rank, util=int(u.gpu), mem_util=int(u.memory))
        except Exception:
            pass

    def finish(self) -> None:
        self.drain()
        self.flush_samples(force=True)
        self.ddp_stats()
        self.write_info()

    def drain(self) -> None:
        """Write the ranges ended since the last drain: lines formatted by hand (the same bytes as
        ``writer.line``; json.dumps per range was most of the heartbeat thread's work), one ``os.write``."""
        lines = []
        head = f'{{"v":{schema.LINE_VERSION},"kind":"{schema.K_RANGE}","rank":{self.p.rank},"t":{time.time()!r},"name":'
        js = self._js
        while self.buf:
            name, cat, tid, t0, t1, payload = self.buf.popleft()
            lines.append(
                f'{head}{js(name)},"cat":{js(cat)},"tid":{tid},"t0":{t0},"t1":{t1},'
                f'"payload":{"null" if payload is None else int(payload)}}}\n'
            )
            if len(lines) >= 1024:
                self.w.write_bytes("".join(lines).encode())
                lines = []
        if lines:
            self.w.write_bytes("".join(lines).encode())
        if self.period > 0:
            self.flush_samples()

    def _js(self, value: Any) -> str:
        """JSON text of a range's name or category, encoded once (bounded: names are few)."""
        out = self.names.get(value)
        if out is None:
            out = json.dumps(value)
            if len(self.names) < 4096:
                self.names[value] = out
        return out


def fsdp_sharding(model: Any) -> dict[str, Any]:
    """An FSDP2 root's sharding, from ``FSDPState``: per sharded module (the root and every ``fully_shard``
    inside it) its mesh, whether it reshards after forward, its mixed precision, its sharded parameters."""
    state = model._get_fsdp_state()
    states = list(getattr(state._state_ctx, "all_states", None) or [state])
    mods, reshard, params, sharded = 0, 0, 0, 0
    mesh: dict[str, Any] = {}
    mp: dict[str, Any] = {}
    for s in states:
        pg = getattr(s, "_fsdp_param_group", None)
        if pg is None:
            continue
        mods += 1
        reshard += pg.post_forward_mesh_info is not None
        for fp in pg.fsdp_params:
            params += 1
            local = getattr(fp.sharded_param, "_local_tensor", fp.sharded_param)
            sharded += int(local.numel()) * int(local.element_size())
        if not mesh:
            m = pg.mesh_info.mesh
            mesh = {"shape": list(m.shape), "dims": list(m.mesh_dim_names or ())}
        if not mp:
            pol = s._mp_policy
            mp = {
                k: str(getattr(pol, k)).replace("torch.", "")
                for k in ("param_dtype", "reduce_dtype", "output_dtype")
                if getattr(pol, k, None) is not None
            }
    return {
        "kind": "FSDP2",
        "modules": mods,
        "reshard_after_forward": reshard,
        "mesh": mesh,
        "mp": mp,
        "params": params,
        "sharded_bytes": sharded,
    }


FSDP1_MODULE = "torch.distributed.fsdp.fully_sharded_data_parallel"


def _fsdp_kind(model: Any) -> str | None:
    """ "FSDP2" for a ``fully_shard`` root, "FSDP1" for a ``FullyShardedDataParallel``, else None."""
    if hasattr(model, "_get_fsdp_state"):
        return "FSDP2"
    fsdp1 = sys.modules.get(FSDP1_MODULE)
    if fsdp1 is not None and isinstance(model, fsdp1.FullyShardedDataParallel):
        return "FSDP1"
    return None


def fsdp1_sharding(root: Any) -> dict[str, Any]:
    """An FSDP1 root's sharding, from its ``_FSDPState`` attributes (torch/distributed/fsdp/_init_utils.py):
    the strategy of each FSDP module that holds a flat parameter, the modules and flat parameters, the
    original parameters flattened into them, the bytes of this rank's shards, the shard group's size (and
    the replica group's, hybrid), the root's mixed precision, ``use_orig_params`` and CPU offload."""
    # after the root's lazy init its states are listed; before (a rank that never stepped), the module tree
    states = list(getattr(root, "_all_fsdp_states", None) or type(root).fsdp_modules(root))
    strategies: collections.Counter = collections.Counter()
    flat, params, sharded = 0, 0, 0
    for s in states:
        handle = getattr(s, "_handle", None)
        if handle is None:
            continue
        flat += 1
        strategies[s.sharding_strategy.name.lstrip("_")] += 1
        fp = handle.flat_param
        params += int(getattr(fp, "_num_params", 0) or 0)
        # the shard's size (padded) in the parameters' own dtype: the flat parameter's data may be the
        # unsharded or the low-precision copy when this is read
        local = getattr(fp, "_local_shard", fp)
        sharded += int(fp._sharded_size.numel()) * int(local.element_size())
    pol = root.mixed_precision
    mp = {
        k: str(getattr(pol, k)).replace("torch.", "")
        for k in ("param_dtype", "reduce_dtype", "buffer_dtype")
        if getattr(pol, k, None) is not None
    }
    inter = getattr(root, "_inter_node_pg", None)
    return {
        "kind": "FSDP1",
        "strategies": dict(strategies),
        "modules": len(states),
        "flat_params": flat,
        "params": params,
        "sharded_bytes": sharded,
        "world": int(root.world_size),
        **({"replicas": int(inter.size())} if inter is not None else {}),
        "mp": mp,
        "use_orig_params": bool(root._use_orig_params),
        "cpu_offload": bool(root.cpu_offload.offload_params),
    }


def _timed(tl: Timeline, name: str, fn: Any) -> Any:
    """``fn`` with a range ``name`` (category comm) around its calls on the training thread."""
    main = tl.main_ident

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() != main:
            return fn(*args, **kwargs)
        tok = tl.start(name, "comm")
        try:
            return fn(*args, **kwargs)
        finally:
            tl.end(tok)

    run.__ddpdoctor_timeline__ = True  # type: ignore[attr-defined]
    return run


def _time_once(tl: Timeline, owner: Any, attr: str, name: str) -> None:
    fn = getattr(owner, attr)
    if not getattr(fn, "__ddpdoctor_timeline__", False):
        setattr(owner, attr, _timed(tl, name, fn))


def _install_fsdp_ranges(tl: Timeline, module: Any) -> None:
    """Ranges of FSDP2's collectives on the training thread (FSDP2 calls names the collective wrappers do
    not hold): a parameter group's all-gather, issue (``unshard``) and wait (``wait_for_unshard``), and its
    post-backward (the gradients' reduce-scatter, with its copies)."""
    group = module.FSDPParamGroup
    for attr, name in (
        ("unshard", FSDP_ALL_GATHER),
        ("wait_for_unshard", FSDP_ALL_GATHER),
        ("post_backward", FSDP_REDUCE_SCATTER),
    ):
        _time_once(tl, group, attr, name)


def _install_fsdp1_ranges(tl: Timeline, runtime: Any) -> None:
    """Ranges of FSDP1's collectives on the training thread, around the functions that issue them: a flat
    parameter's all-gather (``FlatParamHandle._all_gather_flat_param``, called only when the handle needs
    unsharding), the gradients' reduce-scatter (``_reduce_grad``: with the hybrid strategies' all-reduce
    across replicas) and NO_SHARD's all-reduce (``_reduce_grad_no_shard``). ``_runtime_utils`` calls both
    by their module-level names, so the module's attributes are replaced."""
    flat = sys.modules[FSDP1_FLAT_PARAM]
    _time_once(tl, flat.FlatParamHandle, "_all_gather_flat_param", FSDP_ALL_GATHER)
    _time_once(tl, runtime, "_reduce_grad", FSDP_REDUCE_SCATTER)
    _time_once(tl, runtime, "_reduce_grad_no_shard", FSDP_ALL_REDUCE)


FSDP_ALL_GATHER = "fsdp all-gather"
FSDP_REDUCE_SCATTER = "fsdp reduce-scatter"
FSDP_ALL_REDUCE = "fsdp all-reduce"  # FSDP1's NO_SHARD
FSDP2_GROUP = "torch.distributed.fsdp._fully_shard._fsdp_param_group"
FSDP1_RUNTIME = "torch.distributed.fsdp._runtime_utils"  # imports FSDP1_FLAT_PARAM first
FSDP1_FLAT_PARAM = "torch.distributed.fsdp._flat_param"


def _ranges_later(tl: Timeline, what: str, install: Any, module: Any) -> None:
    try:
        install(tl, module)
    except Exception as e:  # said, never raised into the user's import
        failures.report(tl.p, f"profile {what} ranges", f"the time in {what}'s all-gathers and reduce-scatters", e)


def install(probe: Any, opts: Any = None) -> Timeline:
    """The profile probe: ranges of backward and DataLoader waits (wrapped here), forward and optimizer step
    (hooks), collectives (collectives.py reads ``probe.timeline``); ``opts``: {"sample_ms": ms} overrides SAMPLE_MS."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import dataloader as dl

    tl = Timeline(probe)
    if isinstance(opts, dict) and opts.get("sample_ms") is not None:
        tl.period = max(0.0, float(opts["sample_ms"])) / 1000.0
    # per-bucket ranges take a Python comm hook (~0.1-0.2 ms a step): asked for, or an NVTX tool to show them
    tl.bucket_ranges = bool(isinstance(opts, dict) and opts.get("bucket_ranges")) or tool_attached()
    tl._autocast = torch.is_autocast_enabled
    # FSDP2's and FSDP1's collectives, once their modules are imported (now, if they are)
    for module, what, do in (
        (FSDP2_GROUP, "FSDP2", _install_fsdp_ranges),
        (FSDP1_RUNTIME, "FSDP1", _install_fsdp1_ranges),
    ):
        if module in sys.modules:
            _ranges_later(tl, what, do, sys.modules[module])
        else:
            from ddpdoctor.rank import imports

            imports.after_import(module, functools.partial(_ranges_later, tl, what, do))
    probe.timeline = tl
    tl.count_samples = bool(isinstance(opts, dict) and opts.get("count_samples"))  # a `profile --scaling` run
    if isinstance(opts, dict) and isinstance(opts.get("knobs"), dict):  # a `ddpdoctor tune` arm
        from ddpdoctor.rank.probes.profile import knobs

        knobs.install(tl, opts["knobs"])
    main = probe.main_ident

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

    reg = DDP.register_comm_hook
    if getattr(reg, "__ddpdoctor_timeline__", False):
        return tl

    @functools.wraps(reg)
    def register_comm_hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        self._ddpdoctor_user_hook = True  # the script's own hook wins; ours is not installed
        return reg(self, *args, **kwargs)

    register_comm_hook.__ddpdoctor_timeline__ = True  # type: ignore[attr-defined]
    DDP.register_comm_hook = register_comm_hook
    return tl
