"""Install the check probes: samplers and loaders (loaders.py), seeds, DDP state, checkpoints."""

from __future__ import annotations

import functools
import os
import sys
import weakref
from typing import Any

from ddpdoctor.record import schema
from ddpdoctor.rank import sites
from ddpdoctor.rank.checks import loaders
from ddpdoctor.rank.checks.digests import _rng_digests
from ddpdoctor.rank.checks.state import Checks


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
            c.event(schema.K_DDP, model=model, flags=flags, init_sync=kwargs.get("init_sync", True),
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
                c.on_module_forward(grad)
                ddp = ddp_ref()
                if not (grad and ddp is not None and ddp.require_backward_grad_sync):
                    return  # an eval forward (model.module on rank 0, no_grad) is no training step
                c.on_sync_forward(model, sys._getframe(1))
                counter["n"] += 1
                n = counter["n"]
                if n == 1 and model == 0:
                    c.event(schema.K_RNG_FIRST_STEP, rng=_rng_digests(torch))
                if fingerprint_due(n, c.every):
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
            c.event(schema.K_SAVE, path=os.path.abspath(path) if isinstance(path, str) else None,
                    step=probe.ddp_fwd, site=sites.user_site(sys._getframe(1)))
        return out

    torch.save = torch_save
    return c
