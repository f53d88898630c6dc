"""Fault: early stop on one rank. Each rank checks its own loss for NaN/inf and leaves the training loop
with `break` when it sees one; rank 1's shard holds a corrupt sample, so rank 1 stops alone and rank 0
waits for it in the next gradient all-reduce.

Expected: hang.early-exit, culprit rank 1, at the break (FAULT) or its last collective (FAULT-LAST).
    torchrun --nproc-per-node 2 f24_early_stop_nan.py --epochs 2
"""

import argparse
import math

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=8)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(160, 6, generator=g)
    y = x.sum(1, keepdim=True)
    x[41, 3] = float("inf")  # one corrupt record in the raw data (index 41: rank 1's shard)
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, shuffle=False)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    stop = False
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for step, (xb, yb) in enumerate(loader):
            loss = nn.functional.mse_loss(model(xb), yb)
            if not math.isfinite(loss.item()):
                print(f"rank {rank}: non-finite loss at epoch {epoch} step {step}, stopping")
                stop = True
                break  # FAULT: a decision taken by this rank alone
            opt.zero_grad()
            loss.backward()  # FAULT-LAST
            opt.step()
        if stop:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
