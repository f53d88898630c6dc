"""Memleak probe: a fast loop (no sleep) whose metric tracker, a small class, keeps every step's output
with its autograd graph, on rank 0 only (`if self.rank == 0` inside the tracker's method).

Expected finding: memleak.autograd-graph, rank 0 only, held by self.history at the line marked STORE.
Command: memleak
"""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Tracker:
    def __init__(self, rank):
        self.rank = rank
        self.history = []

    def record(self, out):
        if self.rank == 0:
            self.history.append(out * 1.0)  # STORE: keeps the graph (should be out.detach())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1024)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    tracker = Tracker(dist.get_rank())
    for _ in range(args.steps):
        out = model(torch.randn(16, 32))
        out.pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        tracker.record(out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
