"""Two nodes of two ranks each (ranks 2-3 on node 1); the fault named by argv[1] happens on node 1
(used by test_multinode_store.py): healthy | conditional | crash | straggler | long."""

import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    mode = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = 400 if mode == "long" else 12
    for step in range(steps):
        loss = model(torch.randn(4, 8)).sum()
        opt.zero_grad()
        loss.backward()
        if mode == "straggler" and rank == 3:
            time.sleep(0.15)  # SLOW: rank 3 is the straggler
        opt.step()
        if mode == "long":
            time.sleep(0.05)
        if mode == "crash" and rank == 2 and step == 6:
            raise RuntimeError("bad batch on rank 2")  # CRASH
    if mode == "conditional" and rank == 3:
        dist.all_reduce(torch.ones(1))  # EXTRA: only rank 3 reduces its loss
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
