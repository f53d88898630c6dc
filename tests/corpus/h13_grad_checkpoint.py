"""Healthy. Activation checkpointing inside a DDP model: each residual block runs under
torch.utils.checkpoint.checkpoint(..., use_reentrant=False), so its activations are recomputed in
backward.

    torchrun --nproc-per-node 2 h13_grad_checkpoint.py --steps 20
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint


class ResBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        return x + self.net(x)


class DeepMLP(nn.Module):
    def __init__(self, dim=32, depth=4, use_checkpoint=True):
        super().__init__()
        self.blocks = nn.ModuleList(ResBlock(dim) for _ in range(depth))
        self.out = nn.Linear(dim, 1)
        self.use_checkpoint = use_checkpoint

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.use_checkpoint and self.training else block(x)
        return self.out(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch_size", type=int, default=16)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(DeepMLP())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randn(args.steps * args.batch_size * world, 32)
    for step in range(args.steps):
        lo = (step * world + rank) * args.batch_size
        x = data[lo:lo + args.batch_size]
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and step % 5 == 0:
            print(f"step {step}: loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
