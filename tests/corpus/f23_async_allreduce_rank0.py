"""Fault: an asynchronous collective issued on rank 0 only. To overlap metric reduction with the
optimizer step, the logging branch starts dist.all_reduce(..., async_op=True) and waits on the handle
after the step, but the branch is guarded by `rank == 0`.

Expected: hang.rank-conditional-collective, culprit rank 0, at the all_reduce call (FAULT).
    torchrun --nproc-per-node 2 f23_async_allreduce_rank0.py --steps 40 --log_every 10
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--log_every", type=int, default=10)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(24, 48), nn.ReLU(), nn.Linear(48, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    for step in range(1, args.steps + 1):
        x = torch.randn(16, 24, generator=g)
        loss = nn.functional.cross_entropy(model(x), x[:, :4].argmax(1))
        opt.zero_grad()
        loss.backward()
        handle = None
        if rank == 0 and step % args.log_every == 0:
            metric = torch.stack([loss.detach(), torch.tensor(float(step))])
            handle = dist.all_reduce(metric, async_op=True)  # FAULT: rank 0 only
        opt.step()
        if handle is not None:
            handle.wait()
            print(f"step {step}: mean loss over ranks {metric[0].item() / world:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
