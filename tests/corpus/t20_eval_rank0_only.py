"""Tricky but healthy. Rank 0 evaluates on its own after each epoch through the unwrapped model
(model.module, no collective inside), while the other ranks go straight on to the next epoch and wait
for rank 0 in the first gradient all-reduce.

    torchrun --nproc-per-node 2 t20_eval_rank0_only.py --epochs 3
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


@torch.no_grad()
def evaluate(net, loader):
    net.eval()
    correct = total = 0
    for x, y in loader:
        correct += (net(x).argmax(1) == y).sum().item()
        total += y.numel()
    net.train()
    return correct / total


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch_size", type=int, default=16)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    x = torch.randn(256, 5)
    y = (x[:, 0] > x[:, 1]).long()
    train = TensorDataset(x[:192], y[:192])
    test_loader = DataLoader(TensorDataset(x[192:], y[192:]), batch_size=64)
    sampler = DistributedSampler(train)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    model = DDP(nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
        if rank == 0:
            print(f"epoch {epoch}: test accuracy {evaluate(model.module, test_loader):.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
