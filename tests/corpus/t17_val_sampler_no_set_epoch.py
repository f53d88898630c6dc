"""Tricky but healthy. The training DistributedSampler gets set_epoch every epoch; the validation
DistributedSampler(shuffle=False) never does, which is fine: its order does not depend on the epoch.
Validation accuracy is reduced across ranks every epoch.

    torchrun --nproc-per-node 2 t17_val_sampler_no_set_epoch.py --epochs 3
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def make_split(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return TensorDataset(x, (x[:, 0] * x[:, 1] > 0).long())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch_size", type=int, default=16)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    train_set, val_set = make_split(192, 0), make_split(64, 1)
    train_sampler = DistributedSampler(train_set, shuffle=True)
    val_sampler = DistributedSampler(val_set, shuffle=False)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
    val_loader = DataLoader(val_set, batch_size=args.batch_size, sampler=val_sampler)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(args.epochs):
        train_sampler.set_epoch(epoch)
        model.train()
        for x, y in train_loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        model.eval()
        counts = torch.zeros(2)
        with torch.no_grad():
            for x, y in val_loader:
                counts += torch.tensor([(model(x).argmax(1) == y).sum().item(), y.numel()])
        dist.all_reduce(counts)
        if rank == 0:
            print(f"epoch {epoch}: val acc {counts[0] / counts[1]:.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
