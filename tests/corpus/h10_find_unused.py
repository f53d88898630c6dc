"""Healthy. A multi-task model whose forward uses only the head of the batch's task: which parameters
get gradients differs from step to step and from rank to rank. DDP(find_unused_parameters=True) is the
documented answer.

    torchrun --nproc-per-node 2 h10_find_unused.py --steps 30
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class MultiTask(nn.Module):
    def __init__(self, tasks=3):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
        self.heads = nn.ModuleList(nn.Linear(32, 1) for _ in range(tasks))

    def forward(self, x, task):
        return self.heads[task](self.trunk(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(MultiTask(), find_unused_parameters=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(100 + rank)  # each rank's data stream (its own shard)
    for step in range(args.steps):
        task = int(torch.randint(0, 3, (1,), generator=g))
        x = torch.randn(8, 16, generator=g)
        loss = (model(x, task) - x[:, :1] * (task + 1)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0 and rank == 0:
            print(f"step {step} task {task} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
