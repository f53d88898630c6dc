"""Fault: uneven inputs without join. The data comes in files of different sizes, split by rank
(file i goes to rank i % world), so rank 0 has more batches than rank 1; nothing evens them out (no
model.join(), no DistributedSampler). Rank 1 reaches the epoch-end all_reduce while rank 0 is still in
the backward of its extra batches.

Expected: hang.uneven-batches, at rank 0's backward / rank 1's epoch-end all_reduce (FAULT lines).
    torchrun --nproc-per-node 2 f25_uneven_no_join.py --epochs 2
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
        for x, y in loader:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()  # FAULT: rank 0's extra batches
            opt.step()
            totals += torch.tensor([loss.item(), 1.0])
        dist.all_reduce(totals)  # FAULT: rank 1 arrives here early
        if rank == 0:
            print(f"epoch {epoch}: mean loss {totals[0] / totals[1]:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
