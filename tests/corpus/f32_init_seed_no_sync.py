"""Fault: per-rank seeds for model init without DDP's broadcast. The script seeds every rank with
seed + rank (meant for data augmentation) before building the model, and turns off DDP's initial
parameter broadcast (init_sync=False) to start faster: the ranks train different models.

Expected (check): drift.init-mismatch, at the seed (FAULT-SEED) and the DDP wrap (FAULT).
    torchrun --nproc-per-node 2 f32_init_seed_no_sync.py --steps 20
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=42)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(args.seed + rank)  # FAULT-SEED
    net = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    model = DDP(net, init_sync=False)  # FAULT
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        x = torch.randn(8, 16)
        loss = (model(x) - x[:, :1]).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    if rank == 0:
        print(f"final loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
