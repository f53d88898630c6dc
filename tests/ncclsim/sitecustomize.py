"""Test-only: NCCL's CPU-side semantics on top of gloo, so the hang suite runs a second time the way a GPU
job behaves. Loaded as ``sitecustomize`` (PYTHONPATH=tests/ncclsim) in rank processes when
DDPDOCTOR_TEST_NCCLSIM=1; nothing of it ships with ddpdoctor.

What NCCL does and this reproduces: a collective called from the user's code returns as soon as it is
enqueued, also without ``async_op=True``; it completes later; the CPU blocks only where it waits for the
result: ``Work.wait()`` of an async collective, DDP's backward (its bucket all-reduces), a barrier. A
collective that no peer matches never completes. Where gloo differs from NCCL it still shows: gloo aborts
a rank on a *size* mismatch (NCCL would hang or corrupt), and a tensor read right after a "synchronous"
call may hold the old values (NCCL's ``.item()`` would wait; a CPU tensor cannot).

Why not a backend registered with ``Backend.register_backend``: c10d gives custom backends no sequence
numbers (``ProcessGroup::getSequenceNumberForGroup`` refuses every backend but gloo, NCCL, XCCL and UCC),
while NCCL has them; patching gloo's process-group methods keeps gloo's sequence numbers, as NCCL's.
"""

import os
import sys

_OPS = (
    "allreduce",
    "broadcast",
    "allgather",
    "_allgather_base",
    "reduce_scatter",
    "_reduce_scatter_base",
    "reduce",
    "alltoall_base",
    "allreduce_coalesced",
)


def _from_user(depth: int = 2) -> bool:
    """Was the torch.distributed function that called us called by the user's code (not by torch itself,
    e.g. all_gather_object, which reads the result at once)?"""
    f = sys._getframe(depth)
    # skip the torch.distributed function itself, ddpdoctor's wrappers and functools
    while f is not None and (
        f.f_code.co_filename.endswith("distributed_c10d.py")
        or "c10d_logger" in f.f_code.co_filename
        or f"{os.sep}ddpdoctor{os.sep}rank{os.sep}" in f.f_code.co_filename
        or f.f_code.co_filename.endswith("functools.py")
    ):
        if f.f_code.co_filename.endswith("distributed_c10d.py") and f.f_code.co_name.endswith("_object"):
            return False
        f = f.f_back
    return f is not None and "site-packages" not in f.f_code.co_filename and "/lib/python3" not in f.f_code.co_filename


class _EnqueuedWork:
    """The Work of a "synchronous" collective on NCCL: ``wait()`` returns at once (the stream waits, not
    the CPU); whether it completed is the real gloo Work's."""

    def __init__(self, work):
        self._work = work

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return self._work.is_completed()

    def is_success(self):
        return self._work.is_success()

    def exception(self):
        return self._work.exception()

    def get_future(self):
        return self._work.get_future()

    def result(self):
        return self._work.result()

    def source_rank(self):
        return self._work.source_rank()

    def __getattr__(self, name):
        return getattr(self._work, name)


_kept = []  # the real Works, so gloo keeps running them after the caller dropped ours


def _patch(pg_cls, name):
    orig = getattr(pg_cls, name, None)
    if orig is None:
        return

    def method(self, *args, **kwargs):
        work = orig(self, *args, **kwargs)
        opts = args[-1] if args else kwargs.get("opts")
        if work is None or getattr(opts, "asyncOp", True) or not _from_user(2):
            return work
        _kept.append(work)
        if len(_kept) > 256:
            del _kept[:128]
        return _EnqueuedWork(work)

    method.__name__ = name
    setattr(pg_cls, name, method)


def _install():
    import torch.distributed as dist

    for name in _OPS:
        _patch(dist.ProcessGroup, name)


if os.environ.get("DDPDOCTOR_TEST_NCCLSIM") == "1" and "RANK" in os.environ and "LOCAL_RANK" in os.environ:
    try:
        _install()
    except Exception as e:  # the test that asked for the simulation will see its verdicts differ
        print(f"ncclsim: not installed: {e}", file=sys.stderr)
