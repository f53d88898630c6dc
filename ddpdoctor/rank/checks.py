"""Probes for ``ddpdoctor check``: what the script does with samplers, seeds, checkpoints and DDP state.

Everything here runs at most once per epoch, per optimizer step, or every ``every`` DDP forwards
(fingerprints); nothing changes what the script computes: samplers yield the same indices, hooks only
read tensors.
"""

from __future__ import annotations

import functools
import hashlib
import os
import random
import sys
import threading
from array import array
from typing import Any

from ddpdoctor.record import schema
from ddpdoctor.record.writer import JsonlWriter
from ddpdoctor.rank import sites

INDEX_CAP = 200_000          # indices kept per sampler epoch (a digest always)
OPTSTEP_DETAIL = 64          # optimizer steps recorded one by one; then a summary at the end


def _digest(values: Any) -> str:
    return hashlib.sha1(array("q", values).tobytes()).hexdigest()[:16]


def _state_digest(obj: Any) -> str:
    return hashlib.sha1(repr(obj).encode()).hexdigest()[:16]


class Checks:
    def __init__(self, probe: Any, every: int) -> None:
        self.p = probe
        self.every = max(1, int(every))
        self.w = JsonlWriter(os.path.join(probe.dir, schema.CHECKS))
        self.fp = JsonlWriter(os.path.join(probe.dir, schema.FINGERPRINTS))
        self.synced = 0       # DDP forwards with gradient sync since the last optimizer step
        self.unsynced = 0     # ... inside no_sync()
        self.opt_steps = 0
        self.accum: dict[str, int] = {}

    def main_thread(self) -> bool:
        return threading.get_ident() == self.p.main_ident

    def event(self, kind: str, **fields: Any) -> None:
        self.w.write(kind, self.p.rank, **fields)

    # -- fingerprints ------------------------------------------------------------------------------
    def fingerprint(self, module: Any, step: int, where: str) -> None:
        import torch

        def fp(t: Any) -> list:
            t = t.detach()
            if t.is_floating_point() or t.is_complex():
                d = t.double().flatten() if not t.is_complex() else torch.view_as_real(t).double().flatten()
                w = torch.arange(d.numel(), dtype=torch.float64, device=d.device).remainder_(7).add_(1)
                return [float(d.sum()), float((d * w).sum())]
            return [int(t.long().sum()), int(t.numel())]

        with torch.no_grad():
            params = {n: fp(t) for n, t in module.named_parameters()}
            bufs = {n: fp(t) for n, t in module.named_buffers()}
        self.fp.write(schema.K_FP, self.p.rank, step=step, where=where, params=params, buffers=bufs)

    # -- optimizer steps -----------------------------------------------------------------------------
    def on_opt_step(self) -> None:
        self.opt_steps += 1
        key = f"{self.synced}/{self.unsynced}"
        self.accum[key] = self.accum.get(key, 0) + 1
        if self.opt_steps <= OPTSTEP_DETAIL:
            self.event("optstep", n=self.opt_steps, synced=self.synced, unsynced=self.unsynced,
                       site=sites.user_site(sys._getframe(2)))
        self.synced = self.unsynced = 0

    def finish(self) -> None:
        self.event("accum_summary", opt_steps=self.opt_steps, histogram=self.accum)


def install(probe: Any, every: int) -> Checks:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, Subset

    c = Checks(probe, every)
    probe.checks = c

    # samplers: the indices each rank draws per epoch (the same list is handed back to the loader)
    s_iter = DistributedSampler.__iter__

    @functools.wraps(s_iter)
    def sampler_iter(self: Any) -> Any:
        idx = list(s_iter(self))
        if c.main_thread():
            c.event("sampler", sid=id(self), epoch=int(getattr(self, "epoch", 0)), seed=int(getattr(self, "seed", 0)),
                    shuffle=bool(getattr(self, "shuffle", True)), drop_last=bool(getattr(self, "drop_last", False)),
                    num_replicas=int(self.num_replicas), sampler_rank=int(self.rank), dataset_len=len(self.dataset),
                    n=len(idx), digest=_digest(idx), indices=idx if len(idx) <= INDEX_CAP else None,
                    site=sites.user_site(sys._getframe(1)))
        return iter(idx)

    DistributedSampler.__iter__ = sampler_iter

    dl_init = DataLoader.__init__

    @functools.wraps(dl_init)
    def loader_init(self: Any, *args: Any, **kwargs: Any) -> None:
        dl_init(self, *args, **kwargs)
        if not c.main_thread():
            return
        try:
            ds = self.dataset
            sub = list(ds.indices) if isinstance(ds, Subset) and len(ds.indices) <= INDEX_CAP else None
            c.event("loader", lid=id(self), sampler=type(self.sampler).__name__,
                    distributed=isinstance(self.sampler, DistributedSampler),
                    iterable=isinstance(ds, torch.utils.data.IterableDataset),
                    dataset=type(ds).__name__, dataset_len=_safe_len(ds), batch_size=self.batch_size,
                    drop_last=self.drop_last, num_workers=self.num_workers,
                    subset_digest=_digest(sub) if sub is not None else None, subset=sub,
                    site=sites.user_site(sys._getframe(1)))
        except Exception:
            pass

    DataLoader.__init__ = loader_init

    # seeds: where and with what the script seeds torch
    seed_fn = torch.manual_seed

    @functools.wraps(seed_fn)
    def manual_seed(seed: Any) -> Any:
        if c.main_thread():
            c.event("seed", seed=int(seed), site=sites.user_site(sys._getframe(1)))
        return seed_fn(seed)

    torch.manual_seed = manual_seed

    # DDP: flags, seeds at construction, fingerprints at construction and every `every` forwards
    ddp_init = DDP.__init__

    @functools.wraps(ddp_init)
    def init(self: Any, module: Any, *args: Any, **kwargs: Any) -> None:
        ddp_init(self, module, *args, **kwargs)
        if not c.main_thread():
            return
        try:
            flags = {k: kwargs.get(k) for k in ("broadcast_buffers", "forward_sync_buffers", "init_sync",
                                                 "find_unused_parameters", "static_graph", "bucket_cap_mb",
                                                 "gradient_as_bucket_view")}
            bn = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and getattr(m, "track_running_stats", False)
                     for m in module.modules())
            nbytes = sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)
            c.event("ddp", flags=flags, init_sync=kwargs.get("init_sync", True),
                    forward_sync_buffers=bool(getattr(self, "forward_sync_buffers", getattr(self, "broadcast_buffers", True))),
                    batchnorm=bn, param_bytes=nbytes, site=sites.user_site(sys._getframe(1)),
                    rng=_rng_digests(torch))
            c.fingerprint(module, 0, "ddp-init")
            counter = {"n": 0}

            def pre_hook(mod: Any, _inputs: Any) -> None:
                # runs after DDP synced buffers for this forward, before the module computes
                counter["n"] += 1
                n = counter["n"]
                if n == 1:
                    c.event("rng_first_step", rng=_rng_digests(torch))
                if n == 1 or n % c.every == 0:
                    c.fingerprint(mod, n, "forward")

            module.register_forward_pre_hook(pre_hook)
        except Exception:
            pass

    DDP.__init__ = init

    # checkpoints
    save = torch.save

    @functools.wraps(save)
    def torch_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        out = save(obj, f, *args, **kwargs)
        if c.main_thread():
            path = os.fspath(f) if isinstance(f, (str, os.PathLike)) else getattr(f, "name", None)
            c.event("save", path=os.path.abspath(path) if isinstance(path, str) else None,
                    step=probe.ddp_fwd, site=sites.user_site(sys._getframe(1)))
        return out

    torch.save = torch_save

    from torch.optim.optimizer import register_optimizer_step_pre_hook

    register_optimizer_step_pre_hook(lambda _opt, _a, _k: c.on_opt_step() if c.main_thread() else None)
    return c


def _safe_len(ds: Any) -> int | None:
    try:
        return len(ds)
    except Exception:
        return None


def _rng_digests(torch: Any) -> dict[str, Any]:
    out = {"torch_initial_seed": int(torch.initial_seed()),
           "torch": hashlib.sha1(bytes(torch.get_rng_state().tolist())).hexdigest()[:16],
           "random": _state_digest(random.getstate())}
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            out["numpy"] = _state_digest(np.random.get_state()[1].tolist())
        except Exception:
            pass
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        try:
            out["cuda"] = hashlib.sha1(bytes(torch.cuda.get_rng_state().tolist())).hexdigest()[:16]
        except Exception:
            pass
    return out
