"""Fault: a straggler. Rank 1 dumps debug information between forward and backward every step (host work
that the other ranks do not do), so rank 0 waits for it in every gradient all-reduce.

Expected (profile): profile.straggler (warning), culprit rank 1.
    torchrun --nproc-per-node 2 f28_straggler_sleep.py --steps 40
"""

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def dump_debug(logits, step, slow_ms):
    # stands in for writing activations to a slow network disk
    _ = logits.detach().abs().mean().item()
    time.sleep(slow_ms / 1000)  # FAULT


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--debug_rank", type=int, default=1)
    p.add_argument("--slow_ms", type=float, default=20.0)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 8)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        x = torch.randn(32, 64)
        logits = model(x)
        if rank == args.debug_rank:
            dump_debug(logits, step, args.slow_ms)
        loss = nn.functional.cross_entropy(logits, x[:, :8].argmax(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
