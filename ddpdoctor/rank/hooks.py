"""The rank-probe protocol: what a probe inside one rank is, and the registry of probes.

A probe is a module with ``install(probe, settings) -> RankProbe``: it wraps what it needs (samplers,
``torch.save``, ``torch.autograd.backward``...) and returns an object whose hooks ``wrappers.py`` (the
wrappers) and ``probe.py`` (the heartbeat) call:

- ``on_forward(model)`` / ``after_forward(model)``: around every forward of a root model: every
  ``DistributedDataParallel.forward`` (the one DDP.forward wrapper in ``wrappers.py``), an FSDP2 root's or
  an FSDP1 root's forward (``steps.py``; ``model`` is then no DDP: a hook that needs DDP checks) (any
  thread for DDP: a hook that cares checks
  ``threading.get_ident() == probe.main_ident``); ``after_forward`` hooks run in reverse order;
- ``on_optimizer_step(opt)`` / ``after_optimizer_step(opt)``: around every optimizer step (the main thread
  only), from one pair of torch's global optimizer hooks;
- ``after_step(n)``: a training step ended (``steps.py``: the one notion of a step for every job shape);
- ``on_tick()``: after every heartbeat, on the heartbeat thread (never the training thread): drain
  buffers, sample what is sampled once a beat (the profile's ranges and GPU utilisation);
- ``finish()``: the script has returned (or raised); write what is left.

Only the hooks a probe overrides are called: ``wrappers.install`` keeps a tuple of bound methods per hook,
built once, so the DDP.forward wrapper of a run without probes loops over nothing.

Adding a probe: a package in ``rank/probes/`` with ``install`` and a ``RankProbe`` subclass, and one line in
``REGISTRY`` (the family key, which the command's ``settings`` write into the manifest, and the package).
"""

from __future__ import annotations

import functools
from typing import Any

from ddpdoctor.rank import active, failures

# family (the manifest key the command's settings write) -> package (installed in this order; after_* hooks run in the reverse order)
REGISTRY: dict[str, str] = {
    "check": "ddpdoctor.rank.probes.check",  # ddpdoctor check: samplers, loaders, seeds, DDP state, saves
    "memleak": "ddpdoctor.rank.probes.memleak",  # ddpdoctor memleak: per-step memory, censuses
    "profile": "ddpdoctor.rank.probes.profile",  # ddpdoctor profile: ranges, line samples, NVTX
}

HOOKS = ("on_forward", "after_forward", "on_optimizer_step", "after_optimizer_step", "after_step", "on_tick", "finish")


class RankProbe:
    """Base of a probe: every hook does nothing; a probe overrides the ones it needs. ``family`` (its key in
    ``REGISTRY``) and ``records`` (what it writes, in words) name it when one of its hooks fails
    (``rank/failures.py``: the report's ``probe.internal-error`` says which data is missing)."""

    family = ""
    records = ""

    def on_forward(self, model: Any) -> None:
        """Before DDP.forward of ``model`` runs."""

    def after_forward(self, model: Any) -> None:
        """After DDP.forward of ``model`` returned or raised."""

    def on_optimizer_step(self, opt: Any) -> None:
        """Before ``opt.step()`` (main thread)."""

    def after_optimizer_step(self, opt: Any) -> None:
        """After ``opt.step()`` (main thread)."""

    def after_step(self, n: int) -> None:
        """Training step ``n`` (1, 2, ...) ended: the one notion of a step, whatever the job's shape
        (``rank/steps.py``; main thread)."""

    def on_tick(self) -> None:
        """After a heartbeat (heartbeat thread; also after the final beat, once ``finish`` ran)."""

    def finish(self) -> None:
        """The script ended: close what is open, write summaries."""


def bound(probes: list[RankProbe], hook: str) -> tuple:
    """The ``hook`` methods of the probes that override it, as a tuple (in reverse order for after_*)."""
    base = getattr(RankProbe, hook)
    out = tuple(getattr(p, hook) for p in probes if getattr(type(p), hook, base) is not base)
    return out[::-1] if hook.startswith("after_") else out


def install_all(probe: Any, manifest: dict[str, Any]) -> list[RankProbe]:
    """Install the probes the manifest names (its key's value is the probe's settings)."""
    import importlib

    from ddpdoctor.rank import failures

    out = []
    for key, module in REGISTRY.items():
        settings = manifest.get(key)
        if settings:
            try:
                out.append(importlib.import_module(module).install(probe, settings))
            except Exception as e:  # the script still runs, with the other probes; the report says what is missing
                failures.report(
                    probe,
                    f"{key} probe (install)",
                    f"everything the {key} probe records (its findings cannot be judged)",
                    e,
                )
    return out


def run(hooks_: tuple, model: Any) -> None:
    """The rank probes' forward hooks on ``model``; a probe bug never reaches the script, and is said."""
    for h in hooks_:
        try:
            h(model)
        except Exception as e:
            failures.hook_failed(active.probe, h, e)


def wrap_once(owner: Any, name: str, make: Any) -> None:
    """Replace ``owner.name`` by ``make(original)`` unless it is ddpdoctor's wrapper already; the wrapper
    keeps the original's name and docstring, and the original in ``__ddpdoctor_wrapped__``."""
    orig = getattr(owner, name)
    if hasattr(orig, "__ddpdoctor_wrapped__"):
        return
    wrapper = functools.wraps(orig)(make(orig))
    wrapper.__ddpdoctor_wrapped__ = orig
    setattr(owner, name, wrapper)
