"""A gloo job that makes every kind of call a training script makes, with torch's flight recorder on, run under
plain torchrun (tests/frjobs/jobs.py run_job(case, out, job=ZOO_JOB)): the tensor collectives, the object
collectives, p2p (blocking, asynchronous, batched), a subgroup, asynchronous work waited on later, the coalescing
manager, and a DDP model's backward (its bucket all-reduces come from C++). frjob.py's watchdog dumps every rank.

Cases (argv[1]): ``healthy`` every call completes, dumped at the end; ``extra`` rank 1 alone broadcasts an object
list once more under ``if rank == 1`` after the DDP steps (EXTRA): rank 0 goes on to its next call and waits.
"""

import datetime
import signal
import sys
import threading
import time

import frjob
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def tensor_calls(rank: int, world: int) -> None:
    x = torch.full((4, 4), float(rank))
    dist.all_reduce(x)
    dist.broadcast(x, src=0)
    dist.reduce(x, dst=0)
    parts = [torch.empty(4, 4) for _ in range(world)]
    dist.all_gather(parts, x)
    flat = torch.empty(world * 4, 4)
    dist.all_gather_into_tensor(flat, x)
    dist.gather(x, parts if rank == 0 else None, dst=0)
    dist.scatter(x, parts if rank == 0 else None, src=0)
    out = torch.empty(4, 4)
    dist.reduce_scatter_tensor(out, torch.ones(world * 4, 4))
    dist.all_to_all_single(torch.empty(world * 2), torch.ones(world * 2))
    dist.barrier()


def object_calls(rank: int, world: int) -> None:
    got = [None] * world
    dist.all_gather_object(got, {"rank": rank, "loss": 0.5 * rank})
    objs = [{"lr": 0.1}] if rank == 0 else [None]
    dist.broadcast_object_list(objs, src=0)
    dist.gather_object({"rank": rank}, got if rank == 0 else None, dst=0)
    out = [None]
    dist.scatter_object_list(out, [{"shard": r} for r in range(world)] if rank == 0 else None, src=0)


def p2p_calls(rank: int, world: int) -> None:
    peer = (rank + 1) % world
    prev = (rank - 1) % world
    t = torch.ones(8)
    if rank == 0:
        dist.send(t, peer)
        dist.recv(t, prev)
    else:
        dist.recv(t, prev)
        dist.send(t, peer)
    reqs = [dist.isend(t, peer), dist.irecv(torch.empty(8), prev)]
    for r in reqs:
        r.wait()
    ops = [dist.P2POp(dist.isend, t, peer), dist.P2POp(dist.irecv, torch.empty(8), prev)]
    for r in dist.batch_isend_irecv(ops):
        r.wait()


def async_and_groups(rank: int, world: int, side: object) -> None:
    works = [dist.all_reduce(torch.ones(16), async_op=True) for _ in range(3)]
    for w in works:
        w.wait()
    dist.all_reduce(torch.ones(4), group=side)
    dist.barrier(group=side)
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.all_reduce(torch.ones(4))
        dist.all_reduce(torch.ones(4))
    cm.wait()


def ddp_steps(rank: int, progress: list) -> None:
    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(4):
        progress[0] = time.monotonic()
        loss = model(torch.randn(8, 16)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        with model.no_sync():  # gradient accumulation: no all-reduce on this backward
            model(torch.randn(8, 16)).sum().backward()
        progress[0] = None


def main() -> None:
    case = sys.argv[1]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    side = dist.new_group(list(range(world)))
    progress: list = [None]
    threading.Thread(target=frjob.watchdog, args=(rank, progress), daemon=True).start()
    progress[0] = time.monotonic()
    tensor_calls(rank, world)
    object_calls(rank, world)
    p2p_calls(rank, world)
    async_and_groups(rank, world, side)
    progress[0] = None
    ddp_steps(rank, progress)
    progress[0] = time.monotonic()
    if case == "extra" and rank == 1:
        dist.broadcast_object_list([{"eval": True}], src=1)  # EXTRA: only rank 1 makes this call
    dist.all_reduce(torch.ones(2))  # LAST
    progress[0] = None
    if case == "healthy":
        frjob.settled()
        frjob.dump(rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, frjob._on_sigterm)
    main()
