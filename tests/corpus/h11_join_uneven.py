"""Healthy. Uneven inputs done right: ranks get different numbers of batches (files of different sizes,
split by rank) and train inside `with model.join():`, so the rank that finishes first shadows the
others' all-reduces; the epoch totals are reduced after the join block.

    torchrun --nproc-per-node 2 h11_join_uneven.py --epochs 2
"""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import ConcatDataset, DataLoader, TensorDataset


def load_file(i, n):
    g = torch.Generator().manual_seed(i)
    x = torch.randn(n, 10, generator=g)
    return TensorDataset(x, x.mean(1, keepdim=True))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=8)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    file_sizes = [80, 24, 40, 24]
    mine = ConcatDataset([load_file(i, n) for i, n in enumerate(file_sizes) if i % world == rank])
    loader = DataLoader(mine, batch_size=args.batch_size, shuffle=True)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(10, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(args.epochs):
        totals = torch.zeros(2)
        with model.join():
            for x, y in loader:
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                totals += torch.tensor([loss.item(), 1.0])
        dist.all_reduce(totals)
        if rank == 0:
            print(f"epoch {epoch}: mean loss {totals[0] / totals[1]:.4f} over {int(totals[1])} steps")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
