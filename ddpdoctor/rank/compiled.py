"""What torch.compile sees of the rank probes: nothing (issue 51).

Dynamo decides for every frame it meets, and for every call it traces into, whether to trace it; its
decisions by file are ``torch._dynamo.trace_rules``. Left alone, it traced ddpdoctor's ``DDP.forward``
wrapper (``torch.compile(ddp_model)`` picks its top frame by ``trace_rules.check(model.forward)``), guarded
on the probe's counters, recompiled every step, and warned about the thread clock; a ``dist.all_reduce``
inside a compiled function reached the wrapper instead of torch's traceable collective. So, once dynamo is
imported (a rank that never compiles never loads it: ~0.8 s):

- ddpdoctor's package joins dynamo's skipped directories: a ddpdoctor frame that runs while a compiled
  region's frame callback is set is never traced, counted or compiled;
- the two files whose wrappers stand where torch's own functions stood and are called from traced code
  (``wrappers.py``: ``DDP.forward``; ``collectives.py``) are inlined when called, as ``torch.nn`` and
  ``torch.distributed`` are: the wrapper's first test, ``torch.compiler.is_compiling()``, is a constant
  there and the traced call is the original's, so the graph, its guards and its breaks are bare's;
- each collective wrapper maps to the traceable collective its original maps to
  (``collectives.register_with_dynamo``);
- the bookkeeping that such a wrapper runs eagerly inside a compiled region (around ``DDP.forward``,
  check's fingerprint after ``DDP._pre_forward``) is ``eager``: it runs under ``torch._dynamo.disable``,
  so whatever it calls (probes, the standard library) is no frame dynamo converts.

``torch.compiler.disable`` on the wrappers themselves would not do: a disabled function is a graph break
where bare has none (with ``recursive=True`` the user's module under ``DDP.forward`` would not be compiled
at all; with ``recursive=False`` every function the wrapper calls becomes a compiled frame).
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any

from ddpdoctor.rank import active, failures, imports

DYNAMO = "torch._dynamo"
_registered = False


_eager: list[list] = []  # per eager function, a box holding what it runs


def eager(fn: Any) -> Any:
    """``fn``, run with dynamo's frame callback off once dynamo is loaded (before, there is no callback to
    turn off): called from a wrapper that a compiled region runs eagerly (the remainder after a graph
    break), none of the frames it calls (probes, the standard library) is converted. ~0.3 µs a call more
    once dynamo is loaded (``torch._dynamo.disable``), one call layer before."""
    box = [fn]
    _eager.append(box)
    if _registered and DYNAMO in sys.modules:  # made after dynamo's import (a probe installed late)
        box[0] = sys.modules[DYNAMO].disable(fn)

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        return box[0](*args, **kwargs)

    return run


def install() -> None:
    """Hide the probes from dynamo now if it is loaded, else the moment it is imported (rank/imports.py)."""
    if DYNAMO in sys.modules:
        register()
    else:
        imports.after_import(DYNAMO, _dynamo_imported)


def _dynamo_imported(_module: Any) -> None:
    register()


def register() -> None:
    """Tell dynamo about ddpdoctor (once): see the module's docstring. A failure is said, never raised into
    the user's ``import``."""
    global _registered
    if _registered:
        return
    _registered = True
    try:
        # called at the end of dynamo's own import: in sys.modules, not yet an attribute of torch
        dynamo = sys.modules[DYNAMO]
        from torch._dynamo import trace_rules

        import ddpdoctor
        from ddpdoctor.rank import collectives, steps, wrappers  # (their bookkeeping made its Eager functions)

        trace_rules.add(ddpdoctor.__name__)  # the package's directory joins dynamo's SKIP_DIRS
        for module in (
            wrappers,
            collectives,
            steps,
        ):  # steps: FSDP's forward hooks  # dynamo compares file names as posix paths
            trace_rules.BUILTIN_INLINE_WHEN_CALLED.add(Path(os.path.normpath(module.__file__)).as_posix())
        collectives.register_with_dynamo()
        for box in _eager:
            box[0] = dynamo.disable(box[0])
    except Exception as e:
        p = active.probe
        if p is not None:
            failures.report(
                p,
                "torch.compile registration",
                "dynamo may trace the probes' wrappers: recompiles and graph breaks bare would not have",
                e,
            )
