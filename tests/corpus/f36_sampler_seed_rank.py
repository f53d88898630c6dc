"""Fault: DistributedSampler seeded per rank. The script "decorrelates" the ranks by passing
seed=args.seed + rank to DistributedSampler; every rank then permutes differently and the shards
overlap (some samples seen twice per epoch, others never).

Expected (check): data.sampler-seed-mismatch, at the sampler (FAULT) or the loop (FAULT-LOOP);
data.shard-overlap may come with it.
    torchrun --nproc-per-node 2 f36_sampler_seed_rank.py --epochs 2
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
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--batch_size", type=int, default=16)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(args.seed)
    data = TensorDataset(torch.randn(192, 8), torch.randn(192, 1))
    sampler = DistributedSampler(data, shuffle=True, seed=args.seed + rank)  # FAULT
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    model = DDP(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:  # FAULT-LOOP
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
