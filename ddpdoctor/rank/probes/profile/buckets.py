"""``ddpdoctor profile``: each DDP bucket all-reduce as a range, from enqueue to completion."""

from __future__ import annotations

from typing import Any


def ensure_bucket_hook(model: Any, tl: Any) -> None:
    """A comm hook equal to DDP's default all-reduce that records each bucket from enqueue to completion.
    Installed at the first forward, unless the script registered a hook of its own."""
    if getattr(model, "_ddpdoctor_hook", False) or getattr(model, "_ddpdoctor_user_hook", False):
        return
    model._ddpdoctor_hook = True
    try:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        pg = model.process_group
        world = dist.get_world_size(pg)
        raw_all_reduce = getattr(dist.all_reduce, "__ddpdoctor_wrapped__", dist.all_reduce)  # not a user call
        sizes: list[int] = []
        tl.buckets = sizes
        tl.bucket_cap_mb = getattr(model, "bucket_bytes_cap", 0) / 2**20

        def hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP rejects other annotations
            buf = bucket.buffer()
            idx = bucket.index()
            while len(sizes) <= idx:
                sizes.append(0)
            sizes[idx] = buf.numel() * buf.element_size()
            tok = tl.start(f"all_reduce bucket {idx}", "comm", idx)
            fut = raw_all_reduce(buf.div_(world), group=pg, async_op=True).get_future()

            def done(f):  # type: ignore[no-untyped-def]
                tl.end(tok)
                return f.value()[0]

            return fut.then(done)

        DDP.register_comm_hook.__wrapped__(model, None, hook)  # type: ignore[attr-defined]
    except Exception as e:  # DDP refused the hook (one already set, another torch): no bucket ranges, said
        from ddpdoctor.rank import active, failures

        failures.report(
            active.probe, "profile bucket ranges", "each DDP bucket's all-reduce range (--bucket-ranges)", e
        )
