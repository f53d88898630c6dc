"""One notion of a training step for every job shape (issue 51): DDP, FSDP2 (``fully_shard``), FSDP1,
compiled models, a hand-written update, gradient accumulation, GradScaler's skipped steps, several
optimizers. Every consumer takes its step from here: profile's step ranges, memleak's series, the
heartbeat's ``steps`` (the live view, the monitor's ``--steps``, the cost line), check's save records.

**What a step is** (docs/how-it-works.md, "Steps"). A step ends

- when an optimizer steps (torch's global optimizer-step post hook: every ``torch.optim`` optimizer, FSDP's
  and a compiled model's included), unless it is a second optimizer stepping after the first with no
  forward or backward between them (a GAN's two optimizers, a model's per-group optimizers: one step);
- when ``GradScaler.step`` returns without stepping its optimizer (inf/NaN gradients: the loop still made
  a step, with no update);
- in a loop where no optimizer ever stepped (a hand-written update), when the next forward of a root model
  begins after a backward reached the model and the user's code touched the model's first parameter or
  its gradient in between (the update, ``zero_grad``: untouched, the backward was a micro-step of
  accumulation), else, where no backward reached it either, at every forward of a root model.

Between two step ends, the forwards of a root model (``DDP.forward``, an FSDP2 root's forward, an FSDP1
root's forward) are the step's forwards: more than one is gradient accumulation.

**Sources.** ``DDP.forward``'s wrapper (``wrappers.py``) calls ``forward_begins``; FSDP2's ``FSDPState``
pre/post-forward hooks and FSDP1's ``forward`` are wrapped here, so an FSDP root's forward reaches the
probes' ``on_forward``/``after_forward`` as a DDP forward does; a backward is seen through a
post-accumulate-grad hook on the first root parameter (no frame of the tool's in the user's backward);
the global optimizer-step hook and ``GradScaler.step`` end steps. None of them is traced by dynamo: the
FSDP wrappers are inlined when called (``compiled.py``) and call FSDP's own hooks, which torch disables
for dynamo, exactly as bare; dynamo does not look at a parameter's post-accumulate-grad hooks; the others
are called from eager code only.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from ddpdoctor.rank import active, compiled, failures, hooks, imports


class Steps:
    """One rank's steps: ``n`` ended so far, ``fwd`` root forwards, and what the next step end needs."""

    __slots__ = (
        "n",
        "fwd",
        "active",
        "bwd_done",
        "bwd_seen",
        "fwd_since",
        "opt_seen",
        "stepped",
        "fsdp_root",
        "how",
        "after",
        "site",
        "param",
        "mark",
    )

    def __init__(self) -> None:
        self.n = 0  # steps ended
        self.fwd = 0  # root forwards (DDP, FSDP2 root, FSDP1 root)
        self.active = False  # a forward or backward began since the last step ended
        self.bwd_done = False  # a backward ended since the last step ended
        self.bwd_seen = False  # a backward ever ended
        self.fwd_since = False  # a root forward began since the last step ended
        self.opt_seen = False  # an optimizer ever stepped: from then on, optimizer steps end steps
        self.stepped: set[int] = set()  # ids of the optimizers stepped in the step that ended last
        self.fsdp_root: Any = None  # the FSDP2 state whose root forward is open
        self.how: dict[str, int] = {}  # steps per way they ended (optimizer, skipped, backward, forward)
        self.after: tuple = ()  # the probes' after_step hooks (set by install)
        self.site: Any = None  # the cost site of a step's end (rank/cost.py; set by install)
        self.param: Any = None  # weakref of the first root model's first parameter (``_touched``)
        self.mark: tuple | None = None  # that parameter and its gradient as the last backward left them

    def fields(self) -> dict[str, Any]:
        """What the finish event says of the steps."""
        return {"steps": self.n, "root_forwards": self.fwd, "step_ends": dict(self.how)}


def _on_main(p: Any) -> bool:
    return threading.get_ident() == p.main_ident


def _lazy_end(p: Any, st: Steps) -> None:
    """A loop with no optimizer: the step before this root forward ends now (see the module's docstring)."""
    if st.opt_seen:
        return
    if st.bwd_done and _touched(st):
        end_step(p, "backward")
    elif not st.bwd_seen and st.fwd_since:
        end_step(p, "forward")


def _state(st: Steps) -> tuple | None:
    """The first root parameter and its gradient: (param version, grad id, grad version); None unknown."""
    param = st.param() if st.param is not None else None
    if param is None:
        return None
    g = param.grad
    g = getattr(g, "_local_tensor", g)  # a DTensor's (FSDP2) own version counter does not move
    w = getattr(param, "_local_tensor", param)
    return (w._version, id(g), g._version if g is not None else -1)


def _touched(st: Steps) -> bool:
    """Since the last backward ended, did the user's code touch the first root parameter or its gradient
    (an update, ``zero_grad``)? Untouched: the backward was a micro-step of gradient accumulation, not a
    step of a hand-written loop. True where no root parameter is known."""
    now = _state(st)
    return now is None or st.mark is None or now != st.mark


def end_step(p: Any, how: str, opt: Any = None) -> None:
    """A step ended: count it, then the probes' ``after_step`` hooks (rank/hooks.py). Its cost is its
    caller's: each source below times one call in cost.SAMPLE on the site ``steps`` (``_timed``); a DDP
    forward's is DDP.forward's site."""
    st: Steps = p.steps
    st.n += 1
    st.active = st.bwd_done = st.fwd_since = False
    st.stepped = {id(opt)} if opt is not None else set()
    st.how[how] = st.how.get(how, 0) + 1
    if p.cost.t_first_step is None:  # no DDP forward marked the loop's start: its first step's end does
        p.cost.t_first_step = time.time()
    for h in st.after:
        try:
            h(st.n)
        except Exception as e:  # a probe bug never reaches the script
            failures.hook_failed(p, h, e)


def _timed(p: Any) -> Any:
    """A cost span for one call in cost.SAMPLE of the step sources (rank/cost.py), else None."""
    site = p.steps.site
    return p.cost.start(site) if site is not None and site.due() else None


def forward_begins(p: Any, model: Any) -> None:
    """A root model's forward begins (``DDP.forward``'s wrapper, the FSDP wrappers below), main thread."""
    if not _on_main(p):
        return
    st: Steps = p.steps
    if st.param is None:
        _first_param(st, model)
    _lazy_end(p, st)
    st.fwd += 1
    st.active = st.fwd_since = True


def _first_param(st: Steps, model: Any) -> None:
    import weakref

    try:
        param = next(p for p in model.parameters() if p.requires_grad)
        param.register_post_accumulate_grad_hook(_grad_accumulated)
        st.param = weakref.ref(param)
    except Exception:  # no parameters, not a module: the steps go without (``_touched``)
        st.param = _nothing


def _nothing() -> None:
    """No root parameter known."""


# -- FSDP roots: the probes' forward hooks as around DDP.forward ------------------------------------------
@compiled.eager
def _root_begins(p: Any, model: Any) -> None:
    span = _timed(p)
    forward_begins(p, model)
    if len(p.ddp_models) < 4:  # the user's modules: roots of memleak's holder search
        p.ddp_models.add(model)
    if p.cost.t_first_step is None:
        p.cost.t_first_step = time.time()
    hooks.run(p.fwd_before, model)
    if span is not None:
        span.stop()


@compiled.eager
def _root_ends(p: Any, model: Any) -> None:
    span = _timed(p)
    hooks.run(p.fwd_after, model)
    if span is not None:
        span.stop()


def _fsdp2_pre_forward(orig: Any) -> Any:
    from torch.compiler import is_compiling

    def _pre_forward(self: Any, module: Any, args: Any, kwargs: Any) -> Any:
        # dynamo inlining this (a compiled FSDP block's hook) finds a constant and FSDP's own hook, which
        # torch disables for dynamo: the graph break bare has, nothing more (rank/compiled.py)
        if is_compiling():
            return orig(self, module, args, kwargs)
        p = active.probe
        if p is not None and self._is_root is not False and _on_main(p):
            st = p.steps
            ctx = self._state_ctx
            # the first state of a forward pass (FSDP's own test, ``iter_forward_root``), not a recompute
            if ctx.iter_forward_root is None and self._training_state.name != "PRE_BACKWARD":
                if st.fsdp_root is not None:  # the last pass raised before FSDP's post-forward: closed now
                    _root_ends(p, module)
                st.fsdp_root = self
                _root_begins(p, module)
        return orig(self, module, args, kwargs)

    return _pre_forward


def _fsdp2_post_forward(orig: Any) -> Any:
    from torch.compiler import is_compiling

    def _post_forward(self: Any, module: Any, input: Any, output: Any) -> Any:
        if is_compiling():
            return orig(self, module, input, output)
        out = orig(self, module, input, output)
        p = active.probe
        if p is not None and p.steps.fsdp_root is self and self._state_ctx.iter_forward_root is None:
            p.steps.fsdp_root = None  # FSDP closed the root's pass (``iter_forward_root`` reset)
            _root_ends(p, module)
        return out

    return _post_forward


def _fsdp1_forward(fwd: Any) -> Any:
    from torch.compiler import is_compiling

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if is_compiling():
            return fwd(self, *args, **kwargs)
        p = active.probe
        # the root only: nested FSDP1 units are marked not-root by the root's lazy init, before they run
        if p is None or self._is_root is False or not _on_main(p):
            return fwd(self, *args, **kwargs)
        _root_begins(p, self)
        try:
            return fwd(self, *args, **kwargs)
        finally:
            _root_ends(p, self)

    return forward


# -- backward, optimizer steps, GradScaler ----------------------------------------------------------------
def _grad_accumulated(param: Any) -> None:
    """The first root parameter's post-accumulate-grad hook: a backward reached it (any thread: on a GPU
    the autograd engine runs it on its device thread). Registered on the parameter, not around
    ``torch.autograd.backward``: no frame of the tool's in the user's backward (a rank's stack, a
    traceback), and nothing dynamo guards on (DDP and FSDP2 use the same hook; FSDP2 runs a sharded
    parameter's after its reduce-scatter)."""
    p = active.probe
    if p is None:
        return
    st: Steps = p.steps
    st.active = st.bwd_done = st.bwd_seen = True
    if not st.opt_seen:
        st.mark = _state(st)


def _optimizer_stepped(opt: Any, _args: Any, _kwargs: Any) -> None:
    """Torch's global optimizer-step post hook: the step ends, unless this is another optimizer of the step
    that ended at the last one (nothing ran between them)."""
    p = active.probe
    if p is None or not _on_main(p):
        return
    st: Steps = p.steps
    span = _timed(p)
    st.opt_seen = True
    if st.active or not st.stepped or id(opt) in st.stepped:
        end_step(p, "optimizer", opt)
    else:
        st.stepped.add(id(opt))
    if span is not None:
        span.stop()


def _scaler_step(step: Any) -> Any:
    def scaler_step(self: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        out = step(self, optimizer, *args, **kwargs)
        p = active.probe
        # the optimizer's own hook ended the step when it stepped; still open: GradScaler skipped it
        if p is not None and p.steps.active and _on_main(p):
            span = _timed(p)
            p.steps.opt_seen = True
            end_step(p, "skipped", optimizer)
            if span is not None:
                span.stop()
        return out

    return scaler_step


class _Finish(hooks.RankProbe):
    """The last step of a loop with no optimizer ends when the script does (first of the probes' finish)."""

    family = "steps"
    records = "the rank's last step"

    def __init__(self, probe: Any) -> None:
        self.p = probe

    def finish(self) -> None:
        st: Steps = self.p.steps
        if not st.opt_seen and (st.bwd_done or (not st.bwd_seen and st.fwd_since)):
            end_step(self.p, "backward" if st.bwd_done else "forward")


_installed = False


def install(probe: Any) -> None:
    """The step sources (idempotent: once per process) and the probes' ``after_step`` hooks. Called by
    ``wrappers.install`` after the probes are installed."""
    global _installed
    probe.steps.after = hooks.bound(probe.probes, "after_step")
    probe.steps.site = probe.cost.site("steps")
    probe.probes.insert(0, _Finish(probe))
    if _installed:
        return
    _installed = True
    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(_optimizer_stepped)
    # each wrapped once its module is imported (now, if it is): a job that never shards imports no FSDP
    for module, what, do in _LATER:
        if module in sys.modules:
            _guarded(probe, what, do)(sys.modules[module])
        else:
            imports.after_import(module, _guarded(probe, what, do))


def _guarded(probe: Any, what: str, do: Any) -> Any:
    def run(module: Any) -> None:
        try:
            do(module)
        except Exception as e:  # said, never raised into the user's import
            failures.report(probe, f"step source ({what})", f"the steps and forwards of a job using {what}", e)

    return run


def _install_scaler(module: Any) -> None:
    hooks.wrap_once(module.GradScaler, "step", _scaler_step)


def _install_fsdp2(module: Any) -> None:
    # before the script's fully_shard binds them as its modules' hooks
    hooks.wrap_once(module.FSDPState, "_pre_forward", _fsdp2_pre_forward)
    hooks.wrap_once(module.FSDPState, "_post_forward", _fsdp2_post_forward)


def _install_fsdp1(module: Any) -> None:
    hooks.wrap_once(module.FullyShardedDataParallel, "forward", _fsdp1_forward)


FSDP2_STATE = "torch.distributed.fsdp._fully_shard._fsdp_state"
_LATER = (
    ("torch.amp.grad_scaler", "GradScaler", _install_scaler),
    (FSDP2_STATE, "FSDP2", _install_fsdp2),
    ("torch.distributed.fsdp.fully_sharded_data_parallel", "FSDP1", _install_fsdp1),
)
