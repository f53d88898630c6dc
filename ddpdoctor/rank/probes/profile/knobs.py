"""The knobs of one ``ddpdoctor tune`` arm, applied without editing the script: DDP's constructor arguments
(``bucket_cap_mb``, ``gradient_as_bucket_view``, ``static_graph``) set in ``DDP.__init__``, a compression
comm hook registered before the first forward, and the DataLoader's ``num_workers``.

Every tune arm (the baseline ones too) records what the script itself asked for (``tune_ddp``,
``tune_loader``), so that the tool proposes only knobs that differ from the script's own settings and can
say the one line to change. The baseline arms change nothing.
"""

from __future__ import annotations

import functools
import inspect
import threading
from typing import Any

from ddpdoctor.rank import failures
from ddpdoctor.record import schema

DDP_ARGS = ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph", "find_unused_parameters")
HOOKS = {"fp16": "fp16_compress_hook", "bf16": "bf16_compress_hook"}


def _splits_itself(dataset: Any) -> bool:
    """Does an IterableDataset split its stream across DataLoader workers (its ``__iter__`` asks
    ``get_worker_info``)? Without it every worker yields the whole stream: more workers repeat samples."""
    try:
        return "get_worker_info" in inspect.getsource(type(dataset).__iter__)
    except (OSError, TypeError):
        return False


def install(tl: Any, knobs: dict[str, Any]) -> None:
    """Wrap ``DDP.__init__`` and ``DataLoader.__init__`` so the arm's ``knobs`` apply; ``tl`` is the
    profile probe (its writer, its rank, and the first-forward call that registers the hook)."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, IterableDataset

    ddp_set = {k: knobs[k] for k in DDP_ARGS[:3] if k in knobs}
    init = DDP.__init__
    sig = inspect.signature(init)

    @functools.wraps(init)
    def ddp_init(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            bound = sig.bind(self, *args, **kwargs)  # no apply_defaults: DDP sees only what it was given
            own = {k: bound.arguments.get(k, sig.parameters[k].default) for k in DDP_ARGS}
            bound.arguments.update(ddp_set)
            args, kwargs = bound.args[1:], bound.kwargs
            tl.w.write(schema.K_TUNE_DDP, tl.p.rank, script=own, arm=ddp_set)
        except Exception as e:  # the script's own call then runs as written, and the report says so
            failures.report(tl.p, "tune DDP arguments", "the arm's DDP settings (this arm ran without them)", e)
        init(self, *args, **kwargs)

    DDP.__init__ = ddp_init

    workers = knobs.get("num_workers")
    dl_init = DataLoader.__init__
    dl_sig = inspect.signature(dl_init)

    @functools.wraps(dl_init)
    def loader_init(self: Any, *args: Any, **kwargs: Any) -> None:
        if threading.get_ident() == tl.main_ident:
            try:
                bound = dl_sig.bind(self, *args, **kwargs)
                ds = bound.arguments.get("dataset")
                iterable = isinstance(ds, IterableDataset)
                splits = iterable and _splits_itself(ds)
                own = int(bound.arguments.get("num_workers") or 0)
                applied = workers is not None and (not iterable or splits)
                if applied:
                    bound.arguments["num_workers"] = int(workers)
                    args, kwargs = bound.args[1:], bound.kwargs
                tl.w.write(
                    schema.K_TUNE_LOADER,
                    tl.p.rank,
                    num_workers=own,
                    arm=int(workers) if applied else None,
                    iterable=iterable,
                    splits=splits,
                )
            except Exception as e:
                failures.report(tl.p, "tune DataLoader", "the arm's num_workers (this arm ran without it)", e)
        dl_init(self, *args, **kwargs)

    DataLoader.__init__ = loader_init
    tl.comm_hook = knobs.get("comm_hook")


def register_hook(tl: Any, model: Any) -> None:
    """Before the first forward: the arm's compression hook, unless the script registered one of its own
    (timeline's wrapper of ``register_comm_hook`` marks the model) or the backend cannot take it (bf16 needs
    NCCL 2.10+: ``_check_comm_hook`` raises TypeError)."""
    name = tl.comm_hook
    if not name:
        return
    if getattr(model, "_ddpdoctor_user_hook", False):
        tl.w.write(schema.K_TUNE_HOOK, tl.p.rank, hook=name, registered=False, why="the script registers its own")
        return
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    try:
        model.register_comm_hook(model.process_group, getattr(default_hooks, HOOKS[name]))
        model._ddpdoctor_user_hook = False  # ours, not the script's
        tl.w.write(schema.K_TUNE_HOOK, tl.p.rank, hook=name, registered=True, why="")
    except (TypeError, RuntimeError) as e:
        tl.w.write(
            schema.K_TUNE_HOOK,
            tl.p.rank,
            hook=name,
            registered=False,
            why=f"{dist.get_backend()}: {str(e).splitlines()[0][:200]}",
        )
