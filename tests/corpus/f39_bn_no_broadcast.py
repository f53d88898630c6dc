"""Fault: BatchNorm buffers drift. The model is wrapped with broadcast_buffers=False (a common
workaround for "inplace operation" errors), so each rank's running_mean/var follow its own shard and
the ranks evaluate (and save) different models.

Expected (check): drift.buffers, at the DDP wrap (FAULT).
    torchrun --nproc-per-node 2 f39_bn_no_broadcast.py --epochs 2
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=16)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    x = torch.randn(256, 6) * torch.linspace(0.5, 3.0, 6)
    data = TensorDataset(x, x.sum(1, keepdim=True))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    net = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
    model = DDP(net, broadcast_buffers=False)  # FAULT
    opt = torch.optim.SGD(model.parameters(), lr=0.02)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(xb), yb).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
