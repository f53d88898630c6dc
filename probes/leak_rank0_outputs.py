"""Memleak probe: rank 0 keeps every step's outputs for a metric, with their autograd graph.

Expected finding: memleak.autograd-graph, rank 0 only, held by outputs at the line marked STORE.
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
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    outputs = []
    for _ in range(args.steps):
        out = model(torch.randn(16, 32))
        out.pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        if rank == 0:
            outputs.append(out)  # STORE: for a metric at the end; keeps the graph (should be out.detach())
        time.sleep(args.step_ms / 1000)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
