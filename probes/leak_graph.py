"""Memleak probe: the classic `total_loss += loss` keeps every step's autograd graph alive, on every rank.

Expected finding: memleak.autograd-graph, ranks 0 and 1, held by total_loss at the line marked ACCUM.
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
    total_loss = 0.0
    for _ in range(args.steps):
        loss = model(torch.randn(16, 32)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        total_loss += loss  # ACCUM: keeps the graph (should be loss.item())
        time.sleep(args.step_ms / 1000)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
