"""Fault: an end-of-epoch validation metric reduced on the main rank only. The trainer averages the
validation accuracy with dist.all_reduce inside `if is_main:` (where the printing is), then every rank
meets at the barrier that keeps them together before the next epoch.

Expected: hang.rank-conditional-collective, culprit rank 0, at the all_reduce (FAULT).
    torchrun --nproc-per-node 2 f40_epoch_val_rank0_barrier.py --epochs 2
"""

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def evaluate(model, loader):
    model.eval()
    correct = torch.zeros(1)
    total = torch.zeros(1)
    with torch.no_grad():
        for x, y in loader:
            correct += (model.module(x).argmax(1) == y).sum()
            total += len(y)
    model.train()
    return correct, total


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    is_main = rank == 0
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(128, 12), torch.randint(0, 3, (128,)))
    val = TensorDataset(torch.randn(32, 12), torch.randint(0, 3, (32,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    val_loader = DataLoader(val, batch_size=16, sampler=DistributedSampler(val, shuffle=False))
    model = DDP(nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 3)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        correct, total = evaluate(model, val_loader)
        if is_main:
            dist.all_reduce(correct)  # FAULT
            dist.all_reduce(total)
            print(f"epoch {epoch}: val acc {(correct / total).item():.3f}")
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
