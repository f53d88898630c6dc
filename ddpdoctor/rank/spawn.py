"""Probes for scripts that start their own ranks with ``torch.multiprocessing.spawn``.

``spawn``/``start_processes`` are wrapped so each child first installs the probes, then calls the
user's function. The child's rank is its spawn index ``i`` (the tutorials' ``setup(rank, world_size)``).
"""

from __future__ import annotations

import functools
import socket
import sys
from typing import Any, Callable

from ddpdoctor.rank import rankfiles


class ProbedEntry:
    """Picklable wrapper around the user's spawn target."""

    def __init__(self, fn: Callable, run_dir: str) -> None:
        self.fn = fn
        self.run_dir = run_dir

    def __call__(self, i: int, *args: Any) -> Any:
        from ddpdoctor.rank import probe, wrappers

        manifest = rankfiles.read_manifest(self.run_dir)
        p = probe.Probe(self.run_dir, i, manifest)
        rankfiles.enable_faulthandler(p.dir)
        p.start(local_rank=i, host=socket.gethostname(), script=sys.argv[0], spawned=True)
        wrappers.install(p, manifest)
        import torch.distributed as dist

        wrappers.rebind_user_imports(dist, (getattr(self.fn, "__globals__", None) or {},))
        try:
            out = self.fn(i, *args)
        except SystemExit as e:
            p.finish(e.code if isinstance(e.code, int) or e.code is None else 1, exception=False)
            raise
        except BaseException as e:
            p.finish(1, rankfiles.error_record(e), exception=True)
            raise
        p.finish(0, exception=False)
        return out


def install(run_dir: str) -> None:
    import torch.multiprocessing as tmp

    mod = sys.modules["torch.multiprocessing.spawn"]
    orig = mod.start_processes
    if hasattr(orig, "__ddpdoctor_wrapped__"):
        return

    @functools.wraps(orig)
    def start_processes(fn: Callable, *args: Any, **kwargs: Any) -> Any:
        return orig(ProbedEntry(fn, run_dir), *args, **kwargs)

    start_processes.__ddpdoctor_wrapped__ = orig  # type: ignore[attr-defined]
    mod.start_processes = start_processes  # what torch.multiprocessing.spawn() calls
    tmp.start_processes = start_processes
