"""Install the check probes: samplers and loaders (loaders.py), seeds, DDP state, checkpoints."""

from __future__ import annotations

import functools
import os
import sys
import weakref
from typing import Any

from ddpdoctor.rank import active, compiled, failures, sites
from ddpdoctor.rank.probes.check import loaders
from ddpdoctor.rank.probes.check.digests import _rng_digests
from ddpdoctor.rank.probes.check.state import Checks
from ddpdoctor.record import schema


def fingerprint_due(n: int, every: int | None) -> bool:
    """Is the n-th synced training forward of a model fingerprinted? With ``every``: forward 1 and every
    ``every``-th. By default forward 1, every 10th up to 100, then every 100th: a drift shows within 100
    steps, and a long run pays one fingerprint per 100 steps (issue 10: the fingerprints were most of a
    check run's cost). The same on every rank: the ranks' fingerprints are compared at the same forward."""
    if every:
        return n == 1 or n % every == 0
    return n == 1 or n % (10 if n <= 100 else 100) == 0


def install(probe: Any, settings: Any = None) -> Checks:
    """Wrap what the checks watch; ``settings``: {"every": N} (fingerprints every N DDP forwards; None:
    the default schedule, :func:`fingerprint_due`)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    every = settings.get("every") if isinstance(settings, dict) else settings
    c = Checks(probe, int(every) if every else None)
    loaders.install(c, torch)

    # seeds: where and with what the script seeds torch
    seed_fn = torch.manual_seed

    @functools.wraps(seed_fn)
    def manual_seed(seed: Any) -> Any:
        if c.main_thread():
            c.event(schema.K_SEED, seed=int(seed), site=sites.user_site(sys._getframe(1)))
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
            flags = {
                k: kwargs.get(k)
                for k in (
                    "broadcast_buffers",
                    "forward_sync_buffers",
                    "init_sync",
                    "find_unused_parameters",
                    "static_graph",
                    "bucket_cap_mb",
                    "gradient_as_bucket_view",
                )
            }
            bn = any(
                isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and getattr(m, "track_running_stats", False)
                for m in module.modules()
            )
            nbytes = sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)
            model = c.models
            c.models += 1
            c.model_params.append({id(p) for p in module.parameters()})
            c.micro.append({})
            ddp_ref = weakref.ref(self)
            c.event(
                schema.K_DDP,
                model=model,
                flags=flags,
                init_sync=kwargs.get("init_sync", True),
                forward_sync_buffers=bool(
                    getattr(self, "forward_sync_buffers", getattr(self, "broadcast_buffers", True))
                ),
                batchnorm=bn,
                param_bytes=nbytes,
                site=sites.user_site(sys._getframe(1)),
                rng=_rng_digests(torch),
            )
            c.fingerprint(module, 0, "ddp-init", model)
            if has_pre_forward:
                c.ddp_state[self] = [model, 0]
            else:  # torch without DDP._pre_forward: a pre-hook on the wrapped module (same point)
                module.register_forward_pre_hook(
                    lambda _mod, _inputs: after_sync(ddp_ref(), model) if c.main_thread() else None
                )
        except Exception as e:
            failures.report(
                active.probe,
                "check DDP-init record",
                "DDP's settings and the parameter fingerprint at DDP init (drift.init-mismatch cannot be judged)",
                e,
            )

    def after_sync(ddp: Any, model: int, st: list | None = None) -> None:
        """A DDP forward after DDP synced its buffers, before the wrapped module computes: count it and
        credit the batches that fed it; fingerprint it when due (the parameters and synced buffers that
        every rank at this collective position must hold)."""
        grad = torch.is_grad_enabled()
        c.on_module_forward(grad)
        if ddp is None or not (grad and ddp.require_backward_grad_sync):
            return  # an eval forward (no_grad) is no training step
        c.on_sync_forward(model, sys._getframe(2))
        if st is None:
            st = c.ddp_state.setdefault(ddp, [model, 0])
        st[1] += 1
        n = st[1]
        if n == 1 and model == 0:
            c.event(schema.K_RNG_FIRST_STEP, rng=_rng_digests(torch))
        if fingerprint_due(n, c.every):
            try:
                seq = int(ddp.process_group._get_sequence_number_for_group())
            except Exception:
                seq = None
            c.fingerprint(ddp.module, n, "forward", model, seq)

    # torch.compile(ddp_model) runs DDP._pre_forward in its eager remainder: what the check does there
    # (a weak dictionary's lookup, the fingerprint) is no frame dynamo converts (rank/compiled.py)
    @compiled.eager
    def synced(ddp: Any) -> None:
        """DDP._pre_forward returned: ``after_sync`` for a DDP this check knows."""
        st = c.ddp_state.get(ddp)
        if st is not None and active.probe is not None and c.main_thread():
            try:
                after_sync(ddp, st[0], st)
            except Exception as e:  # a probe bug never reaches the script's forward
                failures.report(
                    active.probe,
                    "check forward fingerprint",
                    "parameter and buffer fingerprints (drift cannot be judged)",
                    e,
                )

    # the point after DDP's buffer sync: DDP._pre_forward, wrapped on the class, so that nothing is added
    # to the user's module (a hook there would be pickled with torch.save(model.module) and fail, and it
    # takes every forward off nn.Module's fast path: ~6-8 µs a forward)
    has_pre_forward = callable(getattr(DDP, "_pre_forward", None))
    if has_pre_forward and not getattr(DDP._pre_forward, "__ddpdoctor_checks__", False):
        pre_forward = DDP._pre_forward

        @functools.wraps(pre_forward)
        def _pre_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = pre_forward(self, *args, **kwargs)
            synced(self)
            return out

        _pre_forward.__ddpdoctor_checks__ = True  # type: ignore[attr-defined]
        DDP._pre_forward = _pre_forward

    DDP.__init__ = init

    # checkpoints
    save = torch.save

    @functools.wraps(save)
    def torch_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        out = save(obj, f, *args, **kwargs)
        if c.main_thread():
            path = os.fspath(f) if isinstance(f, (str, os.PathLike)) else getattr(f, "name", None)
            c.event(
                schema.K_SAVE,
                path=os.path.abspath(path) if isinstance(path, str) else None,
                step=probe.steps.n,  # the training steps so far (rank/steps.py)
                site=sites.user_site(sys._getframe(1)),
            )
        return out

    torch.save = torch_save
    return c
