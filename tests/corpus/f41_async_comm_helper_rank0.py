"""Fault: one extra asynchronous collective on rank 0 through a small communication helper. Every rank
launches its async all_gather of the loss through `Comm.launch` and waits on the handles every few
steps; rank 0 also launches an all_reduce of a debug counter through the same helper, from a line only
rank 0 runs. The extra all_reduce meets the others' all_gather; every rank then blocks in `wait()`.

Expected: hang.rank-conditional-collective, culprit rank 0, at the helper's launch line (FAULT) or the
rank-0-only call (FAULT-CALLER).
    torchrun --nproc-per-node 2 f41_async_comm_helper_rank0.py --steps 30
"""

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Comm:
    """Keeps the handles of asynchronous collectives and waits on them together."""

    def __init__(self):
        self.handles = []

    def launch(self, fn, *args, **kwargs):
        self.handles.append(fn(*args, async_op=True, **kwargs))  # FAULT

    def sync(self):
        for h in self.handles:
            h.wait()
        self.handles.clear()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(10, 20), nn.Tanh(), nn.Linear(20, 1)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    comm = Comm()
    debug_steps = torch.zeros(1)
    for step in range(args.steps):
        x = torch.randn(32, 10)
        loss = (model(x) - x[:, :1]).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses = [torch.zeros(1) for _ in range(world)]
        if rank == 0 and step == 7:
            debug_steps += step
            comm.launch(dist.all_reduce, debug_steps)  # FAULT-CALLER
        comm.launch(dist.all_gather, losses, loss.detach().reshape(1))
        if step % 4 == 3:
            comm.sync()
            if rank == 0:
                print(step, [round(v.item(), 4) for v in losses])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
