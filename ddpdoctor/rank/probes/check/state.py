"""The check probes' state in one rank: open passes, what trained, optimizer steps, fingerprints."""

from __future__ import annotations

import operator
import os
import sys
import threading
import weakref
from typing import Any

from ddpdoctor.rank import failures, sites
from ddpdoctor.rank.hooks import RankProbe
from ddpdoctor.rank.probes.check.passes import INDEX_PASSES, OPTSTEP_DETAIL, _LoaderPass, _Pass
from ddpdoctor.record import schema
from ddpdoctor.record.writer import JsonlWriter

_forked = False


def _in_child() -> None:
    global _forked
    _forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_child)


class Checks(RankProbe):
    """The check probes of one rank (a RankProbe: DDP forwards and optimizer steps reach it through probe.py)."""

    family = "check"
    records = "sampler, DataLoader, seed, fingerprint and checkpoint records (the check's verdicts may miss faults)"

    def __init__(self, probe: Any, every: int | None) -> None:
        import torch

        self._grad_enabled = torch.is_grad_enabled
        self.p = probe
        self.every = max(1, int(every)) if every else None  # None: the default schedule (install.py)
        self.w = JsonlWriter(os.path.join(probe.dir, schema.CHECKS))
        self.fp = JsonlWriter(os.path.join(probe.dir, schema.FINGERPRINTS))
        self.pid = os.getpid()
        self.synced = 0  # DDP forwards with gradient sync since the last optimizer step
        self.unsynced = 0  # ... inside no_sync()
        self.opt_steps = 0
        self.train_fwds = 0  # DDP forwards with grad enabled, all models
        self.accum: dict[tuple[int, int], int] = {}  # (synced, unsynced) forwards per step -> steps
        self.samplers: dict[int, list] = {}  # id(sampler) -> [ordinal, passes, set_epoch calls, weakref]
        self.loaders: dict[int, int] = {}  # id(loader) -> ordinal
        self.loader_k: dict[int, int] = {}  # loader ordinal -> loader passes so far
        self.lpasses: list[_LoaderPass] = []  # loader passes not yet closed
        self.fresh: list[_LoaderPass] = []  # ... that fetched since the last DDP forward / optimizer step
        self.fed: list[_LoaderPass] = []  # ... that fed a forward with grad since the last optimizer step
        self.last: _LoaderPass | None = None  # the loader pass that fetched last
        self.fetching: _LoaderPass | None = None  # the loader pass whose _next_index is running
        self.live: list[_Pass] = []  # passes whose window is open
        self.unmarked_step: list[_Pass] = []  # ... that have not seen an optimizer step yet
        self.unmarked_fwd: list[_Pass] = []  # ... nor a DDP forward with grad
        self.trained_loaders: set[tuple[int, str]] = set()
        self.models = 0
        self.model_params: list[set[int]] = []  # per DDP model: ids of its parameters
        self.micro: list[dict[tuple, int]] = []  # per DDP model: synced forwards per call site
        self.opt_models: dict[int, list[int]] = {}  # id(optimizer) -> the DDP models it steps
        self.fwd_site: list | None = None  # the user's line of the DDP forward in progress
        # per DDP model: [its ordinal, synced training forwards so far] (install.py's point after the buffer sync)
        self.ddp_state: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def main_thread(self) -> bool:
        # a forked DataLoader worker keeps the parent's thread id: it is not the rank's main thread (a flag
        # set in the child at fork, not a getpid() call per forward)
        return threading.get_ident() == self.p.main_ident and not _forked

    def event(self, kind: str, **fields: Any) -> None:
        self.w.write(kind, self.p.rank, **fields)

    # -- fingerprints ------------------------------------------------------------------------------
    def fingerprint(self, module: Any, step: int, where: str, model: int = 0, seq: int | None = None) -> None:
        """Two float64 sums per tensor. ``seq``: the default group's collective position at that moment;
        ranks at the same position have made the same collectives, so their parameters must agree."""
        import torch

        f64 = torch.float64

        def fp(t: Any) -> list:
            t = t.detach()
            if t.is_floating_point() or t.is_complex():
                # sum(d) and sum(d[i] * (i % 7 + 1)) from the 7 column sums of d seen as rows of 7: one float64
                # pass, no copy of the tensor, no weight vector (fingerprints were most of a check run's cost)
                d = (torch.view_as_real(t) if t.is_complex() else t).reshape(-1)
                n = d.numel()
                m = n - n % 7
                w7 = torch.arange(1, 8, dtype=f64, device=d.device)
                cols = d[:m].view(-1, 7).sum(0, dtype=f64) if m else torch.zeros(7, dtype=f64, device=d.device)
                tail = d[m:].to(f64)
                return [float(cols.sum() + tail.sum()), float((cols * w7).sum() + (tail * w7[: n - m]).sum())]
            return [int(t.long().sum()), int(t.numel())]

        with torch.no_grad():
            params = {n: fp(t) for n, t in module.named_parameters()}
            bufs = {n: fp(t) for n, t in module.named_buffers()}
        self.fp.write(
            schema.K_FP, self.p.rank, step=step, where=where, model=model, params=params, buffers=bufs, seq=seq
        )

    # -- passes ------------------------------------------------------------------------------------
    def open_pass(self, what: str, key: int, k: int, n: int | None, inner: Any = None) -> _Pass:
        ps = _Pass(what, key, k, n, inner, self.opt_steps, self.train_fwds)
        self.live.append(ps)
        self.unmarked_step.append(ps)
        self.unmarked_fwd.append(ps)
        return ps

    def close_pass(self, ps: _Pass, why: str) -> None:
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
            self.event(schema.K_SAMPLER_END, ordinal=ps.key, k=ps.k, n=ps.n, **fields)

    def _mark(self, lst: list, by: str) -> None:
        for ps in lst:
            if ps.what == "sampler":
                self.event(schema.K_SAMPLER_TRAIN, ordinal=ps.key, k=ps.k, by=by)
            elif (ps.key, by) not in self.trained_loaders:  # a loader is marked once
                self.trained_loaders.add((ps.key, by))
                self.event(schema.K_LOADER_TRAIN, ordinal=ps.key, by=by)
        lst.clear()

    # -- the protocol (rank/hooks.py) ------------------------------------------------------------
    def on_forward(self, model: Any) -> None:
        """Count DDP forwards with and without gradient sync (no_sync) since the last optimizer step, and note
        the user's line that called this forward (three frames up: DDP.forward's wrapper, torch's
        ``_call_impl``, ``_wrapped_call_impl``) for the point after DDP's buffer sync (install.py)."""
        sync = getattr(model, "require_backward_grad_sync", None)  # None: an FSDP root (rank/steps.py)
        if sync is not None and self._grad_enabled():
            if sync:
                self.synced += 1
                self.fwd_site = sites.user_site_at(sys._getframe(1))  # per forward: the line once per site
            else:
                self.unsynced += 1

    def on_optimizer_step(self, opt: Any) -> None:
        if self.main_thread():
            self.on_opt_step(opt)

    def on_module_forward(self, grad: bool) -> None:
        """A DDP forward after DDP synced its buffers (install.py): credit the passes that fed it."""
        if grad:
            self.train_fwds += 1
            if self.unmarked_fwd:
                self._mark(self.unmarked_fwd, "fwd")
        if self.fresh:  # the batches fetched since the last forward fed this one
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

    def _credit(self, lp: _LoaderPass, by: str) -> None:
        if (lp.ordinal, by) not in self.trained_loaders:  # a loader is marked once
            self.trained_loaders.add((lp.ordinal, by))
            self.event(schema.K_LOADER_TRAIN, ordinal=lp.ordinal, by=by)
        for ps in lp.samplers:
            if not ps.done:
                self.event(schema.K_SAMPLER_TRAIN, ordinal=ps.key, k=ps.k, by=by)

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
    def new_loader_pass(self, it: Any, old: _LoaderPass | None, frame: Any) -> _LoaderPass | None:
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

    def close_loader_pass(self, lp: _LoaderPass, why: str) -> None:
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
            self.event(
                schema.K_LOADER_PASS,
                ordinal=lp.ordinal,
                k=lp.k,
                n=lp.n,
                batches=lp.batches,
                maxb=lp.maxb,
                index_kind=lp.kind,
                digest=lp.h.hexdigest()[:16] if lp.kind == "int" else None,
                indices=keep.tolist() if keep is not None and lp.kind == "int" else None,
                truncated=lp.truncated,
                steps=lp.steps,
                fwds=lp.fwds,
                exhausted=lp.exhausted,
                why=why,
                site=lp.site,
                first_batch=lp.first,
            )
        except Exception as e:
            failures.report(self.p, "check loader pass", "what a DataLoader pass fetched (the shard checks miss it)", e)

    # -- optimizer steps -----------------------------------------------------------------------------
    def on_sync_forward(self, model: int, frame: Any) -> None:
        """A DDP forward that will all-reduce its gradients: count it per model and call site (noted by
        on_forward when this forward came through DDP, found from ``frame`` otherwise)."""
        site, self.fwd_site = self.fwd_site, None
        if site is None:
            site = sites.user_site_at(frame)
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
        key = (self.synced, self.unsynced)  # text at the end (finish): a tuple costs less per step
        self.accum[key] = self.accum.get(key, 0) + 1
        # micro-steps: synced forwards of one model from one line (a loop) before its optimizer steps;
        # a GAN's D(real) and D(fake) are two lines, not accumulation
        models = self._models_of(opt) if opt is not None else list(range(len(self.micro)))
        micro = 0
        for m in models:
            d = self.micro[m]
            if d:
                micro = max(micro, max(d.values()))
                d.clear()
        if self.opt_steps <= OPTSTEP_DETAIL:
            self.event(
                schema.K_OPTSTEP,
                n=self.opt_steps,
                synced=self.synced,
                unsynced=self.unsynced,
                micro=micro,
                models=models,
                site=sites.user_site(sys._getframe(2)),
            )
        self.synced = self.unsynced = 0

    def finish(self) -> None:
        for lp in list(self.lpasses):
            self.close_loader_pass(lp, "finish")
        for ps in list(self.live):
            self.close_pass(ps, "finish")
        self.event(
            schema.K_ACCUM_SUMMARY,
            opt_steps=self.opt_steps,
            histogram={f"{a}/{b}": n for (a, b), n in self.accum.items()},
        )
