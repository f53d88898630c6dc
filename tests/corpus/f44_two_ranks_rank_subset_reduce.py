"""Fault: the even ranks (the "leaders" of each pair) reduce an extra statistic that the odd ranks never
join, then every rank meets at the end-of-epoch barrier. With 4 ranks no majority issued the same call
at the divergence (ranks 0 and 2: all_reduce; ranks 1 and 3: barrier).

Expected: hang.rank-conditional-collective, culprits ranks 0 and 2, at the all_reduce (FAULT).
    torchrun --nproc-per-node 4 f44_two_ranks_rank_subset_reduce.py --epochs 2
"""

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        grad_norm = torch.zeros(1)
        for _ in range(4):
            loss = model(torch.randn(8, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            grad_norm += sum(p.grad.norm() for p in model.parameters())
            opt.step()
        if rank % 2 == 0:
            dist.all_reduce(grad_norm)  # FAULT
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
