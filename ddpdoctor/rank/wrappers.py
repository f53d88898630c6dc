"""The wrappers a rank's probe installs: ``init_process_group``, ``DDP.forward`` (the one dispatcher of the
rank probes' forward hooks), ``DDP.join_hook``, ``DataLoader.__iter__``, the optimizer-step hooks, and the
public collectives (``collectives.py``); and the rebinding of names the user's modules imported before.

Every wrapper reads the probe from ``active.probe`` (never from ``probe.py``: no import circle).
"""

from __future__ import annotations

import sys
import threading
import time
import types
from typing import Any

from ddpdoctor.rank import active, compiled, failures, hooks, sites, steps
from ddpdoctor.record import schema

# training frameworks whose layers a diagnosis names (imported by the time they init the process group)
FRAMEWORKS = ("lightning", "pytorch_lightning", "accelerate", "transformers", "deepspeed")


def install(probe: Any, manifest: dict[str, Any] | None = None) -> None:
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
    probe.tick_hooks = hooks.bound(probe.probes, "on_tick")
    if probe.opt_before or probe.opt_after:
        _install_optimizer_hooks()

    sites.reset_prefixes()
    collectives.install(dist)
    compiled.install()
    steps.install(probe)  # the one notion of a step (rank/steps.py): its sources and after_step hooks

    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader

    hooks.wrap_once(dist, "init_process_group", lambda init: _init_process_group(init, dist))
    hooks.wrap_once(DDP, "forward", _ddp_forward)
    # model.join() and Join([model]) both ask DDP for its join hook: uneven inputs handled on purpose
    hooks.wrap_once(DDP, "join_hook", _ddp_join_hook)
    hooks.wrap_once(DataLoader, "__iter__", _dataloader_iter)
    rebind_user_imports(dist)


def _init_process_group(init: Any, dist: Any) -> Any:
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        out = init(*args, **kwargs)
        from ddpdoctor.rank import collectives

        collectives.forget_groups()  # a script that destroys and re-creates its process group
        p = active.probe
        if p is not None:
            record_init(p, dist, sites.user_site(sys._getframe(1)))
        return out

    return init_process_group


def record_init(p: Any, dist: Any, site: list | None) -> None:
    """The rank's init record (backend, world size, frameworks, the init line where known). Written by the
    init_process_group wrapper, or by the heartbeat where torch initialised the group through a name the
    wrapper does not hold (``init_device_mesh`` imports its own ``init_process_group``)."""
    try:
        pg = dist.distributed_c10d._get_default_group()
        p.groups.setdefault(getattr(pg, "group_name", None) or "default", pg)
        p.init_seen = True
        backend = str(dist.get_backend())
        from ddpdoctor.rank import collectives

        # the ops torch's recorder records leave the wrappers here (issue 54); a profile keeps them (its
        # communication ranges are the wrappers' timings), and so does a run that asks for them
        recorded = frozenset() if p.keep_wrappers else p.flight.recorded_ops(backend)
        collectives.hand_off(dist, recorded)
        p.events.write(
            schema.K_INIT,
            p.rank,
            global_rank=dist.get_rank(),
            world_size=dist.get_world_size(),
            backend=backend,
            site=site,
            frameworks=[m for m in FRAMEWORKS if m in sys.modules],
            recorded=sorted(recorded),
        )
    except Exception as e:
        failures.report(
            p,
            "init_process_group wrapper",
            "the init record (backend, world size, frameworks, the init line)",
            e,
        )


def _ddp_forward(fwd: Any) -> Any:
    from torch.compiler import is_compiling

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        # dynamo tracing into this call (torch.compile(ddp_model) calls the module from its top frame) finds
        # a constant here and DDP's own forward after it: no read of the probe, no guard on it, the graph
        # and its breaks bare's (rank/compiled.py)
        if is_compiling():
            return fwd(self, *args, **kwargs)
        p = active.probe
        if p is None:
            return fwd(self, *args, **kwargs)
        span = _forward_begins(p, self)
        try:
            return fwd(self, *args, **kwargs)
        finally:
            _forward_ends(p, self, span)

    return forward


# both off dynamo once it is loaded (compiled.eager): a compiled region's eager remainder converts no frame
# of theirs
@compiled.eager
def _forward_begins(p: Any, model: Any) -> Any:
    """The bookkeeping before the user's forward: counts, the loop's start, the probes' hooks. Returns the
    cost span of a sampled call (one in cost.SAMPLE: the wrapper's and the hooks' thread CPU time, not the
    model's), paused for the forward, or None."""
    site = p.cost_forward
    span = p.cost.start(site) if site.due() else None
    p.ddp_fwd += 1
    if p.ddp_fwd <= 4:  # the user's modules inside DDP: roots of memleak's holder search
        p.ddp_models.add(model)
        if p.ddp_fwd == 1:  # the loop's start: the cost line's step time counts from it
            p.cost.t_first_step = time.time()
    p.counters.set_ddp_fwd(p.ddp_fwd)
    steps.forward_begins(p, model)
    if p.fwd_before:
        hooks.run(p.fwd_before, model)
    p.in_ddp_fwd = True
    if span is not None:
        span.pause()
    return span


@compiled.eager
def _forward_ends(p: Any, model: Any, span: Any) -> None:
    """The bookkeeping after the user's forward (returned or raised): the probes' after-hooks."""
    if span is not None:
        span.resume()
    p.in_ddp_fwd = False
    if p.fwd_after:
        hooks.run(p.fwd_after, model)
    if span is not None:
        span.stop()


def _ddp_join_hook(join_hook: Any) -> Any:
    def ddp_join_hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        p = active.probe
        if p is not None:
            p.events.write(schema.K_JOIN, p.rank, site=sites.user_site(sys._getframe(1)))
        return join_hook(self, *args, **kwargs)

    return ddp_join_hook


def _dataloader_iter(it: Any) -> Any:
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
            p.events.write(
                schema.K_DATALOADER,
                p.rank,
                len=n,
                site=sites.user_site(sys._getframe(1)),
                sampler=type(inner).__name__ if inner is not None else None,
            )
        return it(self)

    return __iter__


def _install_optimizer_hooks() -> None:
    """One pair of torch's global optimizer-step hooks that call the probes' hooks (main thread only)."""
    global _opt_hooks
    if _opt_hooks:
        return
    _opt_hooks = True
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    def run(_inner: Any, p: Any, which: str, opt: Any) -> None:
        for h in getattr(p, which):
            try:
                h(opt)
            except Exception as e:  # a probe bug never reaches the script's optimizer step
                failures.hook_failed(p, h, e)

    def dispatch(which: str, cost_site: str) -> Any:
        def hook(opt: Any, _a: Any, _k: Any) -> None:
            p = active.probe
            if p is not None and threading.get_ident() == p.main_ident:
                site = getattr(p, cost_site)
                if site.due():  # one call in cost.SAMPLE timed (rank/cost.py)
                    p.cost.timed(site, run, _nothing, p, which, opt)
                else:
                    run(None, p, which, opt)

        return hook

    pre, post = dispatch("opt_before", "cost_opt_pre"), dispatch("opt_after", "cost_opt_post")
    register_optimizer_step_pre_hook(pre)
    register_optimizer_step_post_hook(post)


_opt_hooks = False


def _nothing() -> None:
    """The user's part of an optimizer hook: none (the step itself runs between the two hooks)."""


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
        if type(fn) is types.FunctionType:  # not isinstance: that asks the object for __class__
            orig = fn.__dict__.get("__ddpdoctor_wrapped__")
            if orig is not None:
                wrapped[id(orig)] = fn
    spaces = [
        vars(m) for m in list(sys.modules.values()) if getattr(m, "__file__", None) and sites.is_user_file(m.__file__)
    ] + list(namespaces)
    for ns in spaces:
        for name, val in list(ns.items()):
            w = wrapped.get(id(val))
            if w is not None:
                ns[name] = w
