"""Probes for ``ddpdoctor check``: what the script does with samplers, seeds, checkpoints and DDP state.

Everything here runs at most once per epoch, per optimizer step, or every ``every`` DDP forwards
(fingerprints); nothing changes what the script computes: samplers yield the same indices, hooks only
read tensors.

Passes. Each iteration of a DistributedSampler (and each DataLoader iterator) is a *pass* with a window:
from its ``__iter__`` until the iterator is freed (the end of the ``for`` loop, or at once for a peek such
as ``next(iter(loader))``). A pass records how many indices it handed out and whether the optimizer
stepped (or a DDP forward with grad ran) inside its window: the analysis counts only passes that trained
as epochs, so a peek or an evaluation loop is not an epoch.

What each rank really iterated. Every DataLoader iterator asks its index sampler for the next batch of
indices through ``_BaseDataLoaderIter._next_index`` (in the main process, with or without workers), so
wrapping it sees the indices of framework-made loaders as well as hand-made ones (Accelerate's
``BatchSamplerShard``, Lightning's DistributedSampler replacement, ``skip_first_batches``). Each pass of an
iterator (a new ``_sampler_iter``) is a *loader pass*: its count, a running digest of every index, the
first ``LOADER_INDEX_CAP`` indices of its first ``INDEX_PASSES`` passes, and the training it fed: an
optimizer step (or DDP forward with grad) is credited to the passes that fetched since the previous
forward, so an evaluation loop that runs in between (no-grad forwards) is not credited. Cost: one
``array`` conversion and a SHA-1 update per batch (about 1-2 us).
"""

from __future__ import annotations

import functools
import hashlib
import operator
import os
import random
import sys
import threading
import weakref
from array import array
from typing import Any

from ddpdoctor.record import schema
from ddpdoctor.record.writer import JsonlWriter
from ddpdoctor.rank import sites

INDEX_CAP = 200_000          # indices kept per sampler epoch (a digest always)
INDEX_PASSES = 8             # passes of one sampler whose indices are kept (digests for all)
OPTSTEP_DETAIL = 64          # optimizer steps recorded one by one; then a summary at the end
SET_EPOCH_DETAIL = 8         # set_epoch calls recorded per sampler
FP_SAMPLE = 1024             # elements read from a data tensor/array for the data set fingerprint
LOADER_INDEX_CAP = 200_000   # indices kept per loader pass (the first ones; a digest of all)
CHAIN_DEPTH = 6              # samplers followed down batch_sampler/sampler attributes
FRAMEWORK_PKGS = {"lightning": "lightning", "pytorch_lightning": "lightning", "lightning_fabric": "lightning",
                  "accelerate": "accelerate", "transformers": "transformers"}


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
        self.pid = os.getpid()
        self.synced = 0       # DDP forwards with gradient sync since the last optimizer step
        self.unsynced = 0     # ... inside no_sync()
        self.opt_steps = 0
        self.train_fwds = 0   # DDP forwards with grad enabled, all models
        self.accum: dict[str, int] = {}
        self.samplers: dict[int, list] = {}      # id(sampler) -> [ordinal, passes, set_epoch calls, weakref]
        self.loaders: dict[int, int] = {}        # id(loader) -> ordinal
        self.loader_k: dict[int, int] = {}       # loader ordinal -> loader passes so far
        self.lpasses: list[_LoaderPass] = []     # loader passes not yet closed
        self.fresh: list[_LoaderPass] = []       # ... that fetched since the last DDP forward / optimizer step
        self.fed: list[_LoaderPass] = []         # ... that fed a forward with grad since the last optimizer step
        self.last: _LoaderPass | None = None     # the loader pass that fetched last
        self.fetching: _LoaderPass | None = None # the loader pass whose _next_index is running
        self.live: list[_Pass] = []              # passes whose window is open
        self.unmarked_step: list[_Pass] = []     # ... that have not seen an optimizer step yet
        self.unmarked_fwd: list[_Pass] = []      # ... nor a DDP forward with grad
        self.trained_loaders: set[tuple[int, str]] = set()
        self.models = 0
        self.model_params: list[set[int]] = []            # per DDP model: ids of its parameters
        self.micro: list[dict[tuple, int]] = []           # per DDP model: synced forwards per call site
        self.opt_models: dict[int, list[int]] = {}        # id(optimizer) -> the DDP models it steps

    def main_thread(self) -> bool:
        # a forked DataLoader worker keeps the parent's thread id: it is not the rank's main thread
        return threading.get_ident() == self.p.main_ident and os.getpid() == self.pid

    def event(self, kind: str, **fields: Any) -> None:
        self.w.write(kind, self.p.rank, **fields)

    # -- fingerprints ------------------------------------------------------------------------------
    def fingerprint(self, module: Any, step: int, where: str, model: int = 0, seq: int | None = None) -> None:
        """Two float64 sums per tensor. ``seq``: the default group's collective position at that moment;
        ranks at the same position have made the same collectives, so their parameters must agree."""
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
        self.fp.write(schema.K_FP, self.p.rank, step=step, where=where, model=model, params=params, buffers=bufs,
                      seq=seq)

    # -- passes ------------------------------------------------------------------------------------
    def open_pass(self, what: str, key: int, k: int, n: int | None, inner: Any = None) -> "_Pass":
        ps = _Pass(what, key, k, n, inner, self.opt_steps, self.train_fwds)
        self.live.append(ps)
        self.unmarked_step.append(ps)
        self.unmarked_fwd.append(ps)
        return ps

    def close_pass(self, ps: "_Pass", why: str) -> None:
        if ps.done:
            return
        ps.done = True
        for lst in (self.live, self.unmarked_step, self.unmarked_fwd):
            try:
                lst.remove(ps)
            except ValueError:
                pass
        fields: dict[str, Any] = {"steps": self.opt_steps - ps.s0, "fwds": self.train_fwds - ps.f0, "why": why}
        if ps.inner is not None and ps.n is not None:
            try:
                consumed = ps.n - operator.length_hint(ps.inner)
            except Exception:
                consumed = None
            fields.update(consumed=consumed, exhausted=consumed is not None and consumed >= ps.n)
        ps.inner = None
        if ps.what == "sampler":
            self.event("sampler_end", ordinal=ps.key, k=ps.k, n=ps.n, **fields)

    def _mark(self, lst: list, by: str) -> None:
        for ps in lst:
            if ps.what == "sampler":
                self.event("sampler_train", ordinal=ps.key, k=ps.k, by=by)
            elif (ps.key, by) not in self.trained_loaders:   # a loader is marked once
                self.trained_loaders.add((ps.key, by))
                self.event("loader_train", ordinal=ps.key, by=by)
        lst.clear()

    def on_forward(self, grad: bool) -> None:
        if grad:
            self.train_fwds += 1
            if self.unmarked_fwd:
                self._mark(self.unmarked_fwd, "fwd")
        if self.fresh:   # the batches fetched since the last forward fed this one
            if grad:
                for lp in self.fresh:
                    lp.fwds += 1
                    if lp.fwds == 1:
                        self._credit(lp, "fwd")
                    if lp not in self.fed:
                        self.fed.append(lp)
            for lp in self.fresh:
                lp.fresh = False
            self.fresh.clear()

    def _credit(self, lp: "_LoaderPass", by: str) -> None:
        if (lp.ordinal, by) not in self.trained_loaders:   # a loader is marked once
            self.trained_loaders.add((lp.ordinal, by))
            self.event("loader_train", ordinal=lp.ordinal, by=by)
        for ps in lp.samplers:
            if not ps.done:
                self.event("sampler_train", ordinal=ps.key, k=ps.k, by=by)

    def _credit_step(self) -> None:
        targets = self.fed or self.fresh
        if not targets and self.last is not None and not self.last.done:
            targets = [self.last]
        for lp in targets:
            lp.steps += 1
            if lp.steps == 1:
                self._credit(lp, "step")
        for lp in self.fresh:
            lp.fresh = False
        self.fresh.clear()
        self.fed.clear()

    # -- loader passes: what the iterator really fetched ----------------------------------------------
    def new_loader_pass(self, it: Any, old: "_LoaderPass | None", frame: Any) -> "_LoaderPass | None":
        if old is not None:
            self.close_loader_pass(old, "next")
        o = it.__dict__.get("_ddpdoctor_loader")
        if o is None or not self.main_thread():
            return None
        k = self.loader_k.get(o, 0)
        self.loader_k[o] = k + 1
        lp = _LoaderPass(o, k, it._sampler_iter, k < INDEX_PASSES, sites.user_site(frame))
        it._ddpdoctor_pass = lp
        self.lpasses.append(lp)
        try:
            fin = weakref.finalize(it, self.close_loader_pass, lp, "freed")
            fin.atexit = False
        except TypeError:
            pass
        return lp

    def close_loader_pass(self, lp: "_LoaderPass", why: str) -> None:
        if lp.done:
            return
        lp.done = True
        lp.src = None
        for lst in (self.lpasses, self.fresh, self.fed):
            try:
                lst.remove(lp)
            except ValueError:
                pass
        if self.last is lp:
            self.last = None
        keep, lp.keep = lp.keep, None
        try:
            self.event("loader_pass", ordinal=lp.ordinal, k=lp.k, n=lp.n, batches=lp.batches, maxb=lp.maxb,
                       index_kind=lp.kind, digest=lp.h.hexdigest()[:16] if lp.kind == "int" else None,
                       indices=keep.tolist() if keep is not None and lp.kind == "int" else None,
                       truncated=lp.truncated, steps=lp.steps, fwds=lp.fwds, exhausted=lp.exhausted, why=why,
                       site=lp.site, first_batch=lp.first)
        except Exception:
            pass

    # -- optimizer steps -----------------------------------------------------------------------------
    def on_sync_forward(self, model: int, frame: Any) -> None:
        """A DDP forward that will all-reduce its gradients: count it per model and call site."""
        site = sites.user_site(frame)
        key = tuple(site[:2]) if site else None
        d = self.micro[model]
        d[key] = d.get(key, 0) + 1

    def _models_of(self, opt: Any) -> list[int]:
        ms = self.opt_models.get(id(opt))
        if ms is None:
            ids = {id(p) for g in getattr(opt, "param_groups", []) for p in g.get("params", [])}
            ms = [m for m, ps in enumerate(self.model_params) if ps & ids]
            self.opt_models[id(opt)] = ms
        return ms

    def on_opt_step(self, opt: Any = None) -> None:
        self.opt_steps += 1
        if self.unmarked_step:
            self._mark(self.unmarked_step, "step")
        self._credit_step()
        key = f"{self.synced}/{self.unsynced}"
        self.accum[key] = self.accum.get(key, 0) + 1
        # micro-steps: synced forwards of one model from one line (a loop) before its optimizer steps;
        # a GAN's D(real) and D(fake) are two lines, not accumulation
        models = self._models_of(opt) if opt is not None else list(range(len(self.micro)))
        micro = max((max(self.micro[m].values(), default=0) for m in models), default=0)
        for m in models:
            self.micro[m].clear()
        if self.opt_steps <= OPTSTEP_DETAIL:
            self.event("optstep", n=self.opt_steps, synced=self.synced, unsynced=self.unsynced, micro=micro,
                       models=models, site=sites.user_site(sys._getframe(2)))
        self.synced = self.unsynced = 0

    def finish(self) -> None:
        for lp in list(self.lpasses):
            self.close_loader_pass(lp, "finish")
        for ps in list(self.live):
            self.close_pass(ps, "finish")
        self.event("accum_summary", opt_steps=self.opt_steps, histogram=self.accum)


class _Pass:
    """One iteration of a sampler or a DataLoader, open until its iterator is freed."""

    __slots__ = ("what", "key", "k", "n", "inner", "s0", "f0", "done", "__weakref__")

    def __init__(self, what: str, key: int, k: int, n: int | None, inner: Any, s0: int, f0: int) -> None:
        self.what, self.key, self.k, self.n, self.inner, self.s0, self.f0 = what, key, k, n, inner, s0, f0
        self.done = False


class _LoaderPass:
    """One pass of a DataLoader iterator, as fetched: counts, a digest of every index, the first indices."""

    __slots__ = ("ordinal", "k", "src", "n", "batches", "maxb", "h", "keep", "truncated", "kind", "steps", "fwds",
                 "exhausted", "fresh", "done", "site", "samplers", "first")

    def __init__(self, ordinal: int, k: int, src: Any, keep: bool, site: Any) -> None:
        self.ordinal, self.k, self.src, self.site = ordinal, k, src, site
        self.n = self.batches = self.maxb = self.steps = self.fwds = 0
        self.h = hashlib.sha1()
        self.keep: array | None = array("q") if keep else None
        self.truncated = self.exhausted = self.fresh = self.done = False
        self.kind = "int"
        self.samplers: list[_Pass] = []
        self.first: str | None = None   # a digest of the first batch (an IterableDataset has no indices)

    def add(self, idx: Any) -> None:
        self.batches += 1
        if self.kind != "int":
            return
        t = type(idx)
        try:
            if t is list or t is tuple:
                a = array("q", idx)
            elif t is int:
                a = array("q", (idx,))
            elif idx is None:
                self.kind = "none"   # an IterableDataset: no indices
                return
            else:
                v = idx.tolist() if hasattr(idx, "tolist") else list(idx)
                a = array("q", v if isinstance(v, list) else (v,))
        except (TypeError, ValueError, OverflowError):
            self.kind = "none" if t is list and idx and idx[0] is None else "opaque"
            return
        m = len(a)
        self.n += m
        if m > self.maxb:
            self.maxb = m
        self.h.update(a)
        keep = self.keep
        if keep is not None and not self.truncated:
            room = LOADER_INDEX_CAP - len(keep)
            if m <= room:
                keep.extend(a)
            else:
                keep.extend(a[:room])
                self.truncated = True


def _feed(inner: Any) -> Any:
    """The sampler's own list iterator, behind a generator (a generator can be watched with a weakref)."""
    yield from inner


def _watch(c: Checks, obj: Any, ps: _Pass) -> None:
    try:
        fin = weakref.finalize(obj, c.close_pass, ps, "freed")
        fin.atexit = False
    except TypeError:
        pass


def install(probe: Any, every: int) -> Checks:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, Subset

    c = Checks(probe, every)
    probe.checks = c

    # samplers: where each is built, its set_epoch calls, and the indices each rank draws per pass
    s_init = DistributedSampler.__init__

    @functools.wraps(s_init)
    def sampler_init(self: Any, *args: Any, **kwargs: Any) -> None:
        s_init(self, *args, **kwargs)
        if not c.main_thread() or _known(c.samplers.get(id(self)), self):
            return
        c.samplers[id(self)] = [len(c.samplers), 0, 0, weakref.ref(self)]
        try:
            c.event("sampler_init", sid=id(self), ordinal=c.samplers[id(self)][0],
                    shuffle=bool(getattr(self, "shuffle", True)), seed=int(getattr(self, "seed", 0)),
                    drop_last=bool(getattr(self, "drop_last", False)), num_replicas=int(self.num_replicas),
                    sampler_rank=int(self.rank), dataset_len=_safe_len(self.dataset),
                    site=sites.user_site(sys._getframe(1)))
        except Exception:
            pass

    DistributedSampler.__init__ = sampler_init

    s_set_epoch = DistributedSampler.set_epoch

    @functools.wraps(s_set_epoch)
    def set_epoch(self: Any, epoch: int) -> None:
        s_set_epoch(self, epoch)
        if c.main_thread():
            st = c.samplers.get(id(self))
            if _known(st, self):
                st[2] += 1
                if st[2] <= SET_EPOCH_DETAIL:
                    c.event("set_epoch", sid=id(self), ordinal=st[0], epoch=_int_or_none(epoch), after=st[1], n=st[2],
                            site=sites.user_site(sys._getframe(1)))

    DistributedSampler.set_epoch = set_epoch

    s_iter = DistributedSampler.__iter__

    @functools.wraps(s_iter)
    def sampler_iter(self: Any) -> Any:
        idx = list(s_iter(self))
        if not c.main_thread():
            return iter(idx)
        st = c.samplers.get(id(self))
        if not _known(st, self):   # built before the probes, or a recycled id
            st = c.samplers[id(self)] = [len(c.samplers), 0, 0, weakref.ref(self)]
        k = st[1]
        st[1] += 1
        keep = len(idx) <= INDEX_CAP and k < INDEX_PASSES
        c.event("sampler", sid=id(self), ordinal=st[0], k=k, epoch=_int_or_none(getattr(self, "epoch", 0)),
                seed=_int_or_none(getattr(self, "seed", 0)), shuffle=bool(getattr(self, "shuffle", True)),
                drop_last=bool(getattr(self, "drop_last", False)), num_replicas=int(self.num_replicas),
                sampler_rank=int(self.rank), dataset_len=_safe_len(self.dataset), n=len(idx), digest=_digest(idx),
                indices=idx if keep else None, site=sites.user_site(sys._getframe(1)))
        inner = iter(idx)
        ps = c.open_pass("sampler", st[0], k, len(idx), inner)
        lp = c.fetching
        if lp is not None:   # drawn by a DataLoader pass: it trained when that pass trained
            lp.samplers.append(ps)
            c.unmarked_step.remove(ps)
            c.unmarked_fwd.remove(ps)
        gen = _feed(inner)
        _watch(c, gen, ps)
        return gen

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
            smp = self.sampler
            if not isinstance(smp, DistributedSampler) and self.batch_sampler is not None:
                smp = getattr(self.batch_sampler, "sampler", smp)
            chain = _sampler_chain(self)
            dsmp = next((s for s in chain if isinstance(s, DistributedSampler)), None)
            if dsmp is not None:
                smp = dsmp
            dist_smp = isinstance(smp, DistributedSampler)
            shard = _framework_shard(self, chain)
            c.loaders[id(self)] = len(c.loaders)
            c.event("loader", lid=id(self), ordinal=c.loaders[id(self)], sampler=type(smp).__name__,
                    sampler_sid=id(smp) if dist_smp else None, distributed=dist_smp,
                    chain=[type(s).__name__ for s in chain], made_by=_made_by(sys._getframe(1)), shard=shard,
                    shuffle=bool(getattr(smp, "shuffle", True)) if dist_smp else
                    type(smp).__name__ == "RandomSampler",
                    iterable=isinstance(ds, torch.utils.data.IterableDataset),
                    dataset=type(ds).__name__, dataset_len=_safe_len(ds), batches=_safe_len(self),
                    batch_size=self.batch_size, drop_last=self.drop_last, num_workers=self.num_workers,
                    prefetch=(self.prefetch_factor or 0) * self.num_workers if self.num_workers else 0,
                    subset_digest=_digest(sub) if sub is not None else None, subset=sub,
                    data_fp=_data_fingerprint(ds), site=sites.user_site(sys._getframe(1)))
        except Exception:
            pass

    DataLoader.__init__ = loader_init

    # what each iterator really fetched: _next_index runs in the main process for every batch
    from torch.utils.data import dataloader as dl_mod

    base_iter = dl_mod._BaseDataLoaderIter
    it_init = base_iter.__init__

    @functools.wraps(it_init)
    def loader_iter_init(self: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
        it_init(self, loader, *args, **kwargs)
        # which loader this iterator serves (before a multi-process iterator prefetches in its __init__)
        o = c.loaders.get(id(loader))
        if o is not None and c.main_thread():
            try:
                self._ddpdoctor_loader = o
            except Exception:
                pass

    base_iter.__init__ = loader_iter_init
    next_index = base_iter._next_index

    @functools.wraps(next_index)
    def loader_next_index(self: Any) -> Any:
        lp = self.__dict__.get("_ddpdoctor_pass")
        if lp is None or lp.src is not self._sampler_iter:
            if "_ddpdoctor_loader" not in self.__dict__:
                return next_index(self)
            try:
                lp = c.new_loader_pass(self, lp, sys._getframe(1))
            except Exception:
                lp = None
            if lp is None:
                return next_index(self)
        c.fetching = lp
        try:
            idx = next_index(self)
        except StopIteration:
            lp.exhausted = True
            raise
        finally:
            c.fetching = None
        try:
            lp.add(idx)
        except Exception:
            lp.kind = "opaque"
        if not lp.fresh:
            lp.fresh = True
            c.fresh.append(lp)
        c.last = lp
        return idx

    base_iter._next_index = loader_next_index
    it_next = base_iter.__next__

    @functools.wraps(it_next)
    def loader_next(self: Any) -> Any:
        batch = it_next(self)
        lp = self.__dict__.get("_ddpdoctor_pass")
        if lp is not None and lp.first is None and lp.kind == "none":
            # an IterableDataset yields no indices: the first batch tells whether ranks read the same stream
            try:
                lp.first = _batch_digest(batch)
            except Exception:
                lp.first = "?"
        return batch

    base_iter.__next__ = loader_next

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
            model = c.models
            c.models += 1
            c.model_params.append({id(p) for p in module.parameters()})
            c.micro.append({})
            ddp_ref = weakref.ref(self)
            c.event("ddp", model=model, flags=flags, init_sync=kwargs.get("init_sync", True),
                    forward_sync_buffers=bool(getattr(self, "forward_sync_buffers", getattr(self, "broadcast_buffers", True))),
                    batchnorm=bn, param_bytes=nbytes, site=sites.user_site(sys._getframe(1)),
                    rng=_rng_digests(torch))
            c.fingerprint(module, 0, "ddp-init", model)
            counter = {"n": 0}

            def pre_hook(mod: Any, _inputs: Any) -> None:
                # runs after DDP synced buffers for this forward, before the module computes
                if not c.main_thread():
                    return
                grad = torch.is_grad_enabled()
                c.on_forward(grad)
                ddp = ddp_ref()
                if not (grad and ddp is not None and ddp.require_backward_grad_sync):
                    return  # an eval forward (model.module on rank 0, no_grad) is no training step
                c.on_sync_forward(model, sys._getframe(1))
                counter["n"] += 1
                n = counter["n"]
                if n == 1 and model == 0:
                    c.event("rng_first_step", rng=_rng_digests(torch))
                if n == 1 or n % c.every == 0:
                    try:
                        seq = int(ddp.process_group._get_sequence_number_for_group())
                    except Exception:
                        seq = None
                    c.fingerprint(mod, n, "forward", model, seq)

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

    register_optimizer_step_pre_hook(lambda opt, _a, _k: c.on_opt_step(opt) if c.main_thread() else None)
    return c


def _sampler_chain(loader: Any) -> list[Any]:
    """The loader's index sampler and the samplers below it (batch_sampler/sampler attributes), outermost first."""
    out: list[Any] = []
    s = getattr(loader, "batch_sampler", None)
    if s is None:
        s = getattr(loader, "sampler", None)
    while s is not None and len(out) < CHAIN_DEPTH and all(s is not x for x in out):
        out.append(s)
        nxt = s.__dict__.get("batch_sampler") if hasattr(s, "__dict__") else None
        if nxt is None:
            nxt = s.__dict__.get("sampler") if hasattr(s, "__dict__") else None
        s = nxt
    return out


def _framework_shard(loader: Any, chain: list[Any]) -> dict[str, Any] | None:
    """A framework layer that shards batches or samples per process (Accelerate's BatchSamplerShard or
    IterableDatasetShard), read from its attributes."""
    for obj in (*chain, getattr(loader, "dataset", None)):
        name = type(obj).__name__
        if name in ("BatchSamplerShard", "IterableDatasetShard"):
            return {"by": type(obj).__module__.split(".")[0], "layer": name,
                    "num_processes": _int_or_none(getattr(obj, "num_processes", None)),
                    "process_index": _int_or_none(getattr(obj, "process_index", None)),
                    "even_batches": getattr(obj, "even_batches", None),
                    "split_batches": getattr(obj, "split_batches", None)}
    return None


def _made_by(frame: Any) -> str | None:
    """The training framework whose code built this DataLoader (None: the user's code)."""
    f = frame
    while f is not None:
        mod = str(f.f_globals.get("__name__", "")).split(".")[0]
        # Lightning wraps DataLoader.__init__ (a `wrapper`) while it calls the user's *_dataloader hooks
        if mod not in ("torch", "ddpdoctor", "functools", "contextlib") and \
                not (mod in FRAMEWORK_PKGS and f.f_code.co_name in ("wrapper", "init_wrapper")):
            return FRAMEWORK_PKGS.get(mod)
        f = f.f_back
    return None


def _safe_len(ds: Any) -> int | None:
    try:
        return len(ds)
    except Exception:
        return None


def _known(st: list | None, obj: Any) -> bool:
    """Is ``st`` the record of this very object (ids are reused once an object is freed)?"""
    return st is not None and st[3]() is obj


def _int_or_none(v: Any) -> int | None:
    try:
        return int(v)
    except Exception:
        return None


def _batch_digest(batch: Any) -> str:
    """Shapes and float64 sums of the tensors in a batch (lists, tuples, dicts), as a short hash."""
    import torch

    h = hashlib.sha1()
    stack, n = [batch], 0
    while stack and n < 16:
        x = stack.pop()
        if isinstance(x, torch.Tensor):
            n += 1
            t = x.detach()
            h.update(repr((tuple(t.shape), str(t.dtype))).encode())
            if t.numel():
                h.update(repr(float(t.double().sum()) if not t.is_complex() else 0.0).encode())
        elif isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
        else:
            h.update(repr(x)[:64].encode())
    return h.hexdigest()[:16]


def _data_fingerprint(ds: Any) -> str | None:
    """A digest of what a data set holds, read from its attributes only (never ``ds[i]``, which would run
    the user's code): tensors and arrays by shape, dtype and up to FP_SAMPLE strided elements; numbers,
    strings and paths by value; lists by length and their first and last elements; nested data sets.
    Two ranks with different digests hold different data (pre-sharded); None when nothing was readable."""
    h = hashlib.sha1()
    seen: set[int] = set()
    if _fp_into(h, ds, 0, seen) == 0:
        return None
    return h.hexdigest()[:16]


def _fp_into(h: Any, v: Any, depth: int, seen: set[int]) -> int:
    if v is None or isinstance(v, (bool, int, float, str, bytes)):
        h.update(repr(v).encode()[:4096])
        return 1
    if isinstance(v, os.PathLike):
        h.update(os.fspath(v).encode(errors="replace") if isinstance(os.fspath(v), str) else os.fspath(v))
        return 1
    if isinstance(v, range):
        h.update(repr(v).encode())
        return 1
    if id(v) in seen or depth > 4:
        return 0
    seen.add(id(v))
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(v, torch.Tensor):
        try:
            t = v.detach()
            if t.layout != torch.strided or t.device.type == "meta":
                return 0
            flat = t.reshape(-1)
            step = max(1, flat.numel() // FP_SAMPLE)
            part = flat[::step][:FP_SAMPLE].cpu()
            if part.is_complex():
                part = torch.view_as_real(part)
            part = part.to(torch.float64 if part.is_floating_point() else torch.int64)
            h.update(f"T{tuple(t.shape)}{t.dtype}".encode())
            h.update(repr(part.tolist()).encode())
            return 1
        except Exception:
            return 0
    tname = type(v).__module__ + "." + type(v).__name__
    if tname.startswith("numpy.") and hasattr(v, "shape") and hasattr(v, "flat"):
        try:
            step = max(1, int(v.size) // FP_SAMPLE)
            h.update(f"A{tuple(v.shape)}{v.dtype}".encode())
            h.update(repr(v.flat[::step][:FP_SAMPLE].tolist()).encode())
            return 1
        except Exception:
            return 0
    if isinstance(v, (list, tuple)):
        h.update(f"L{len(v)}".encode())
        items = list(v) if len(v) <= 128 else list(v[:64]) + list(v[-64:])
        return 1 + sum(_fp_into(h, x, depth + 1, seen) for x in items)
    if isinstance(v, dict):
        h.update(f"D{len(v)}".encode())
        n = 1
        for key in sorted(v, key=repr)[:64]:
            h.update(repr(key).encode()[:256])
            n += _fp_into(h, v[key], depth + 1, seen)
        return n
    d = getattr(v, "__dict__", None)
    if isinstance(d, dict) and depth <= 2 and not callable(v):
        h.update(type(v).__qualname__.encode())
        n = 0
        for key in sorted(d)[:64]:
            if not key.startswith("__"):
                h.update(key.encode())
                n += _fp_into(h, d[key], depth + 1, seen)
        return n
    return 0


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
