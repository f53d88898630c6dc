"""Memleak probe: a cache that fills during the first 40 steps and then stays full. Memory grows, then
stays flat: not a leak.

Expected findings: none.
Command: memleak
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--step-ms", type=float, default=5.0)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cache = {}
    for step in range(args.steps):
        x = torch.randn(16, 32)
        if len(cache) < 40:
            cache[step] = torch.randn(256, 256)  # a bounded cache (256 KiB per entry)
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        time.sleep(args.step_ms / 1000)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
