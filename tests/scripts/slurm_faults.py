"""A tiny DDP job for the SLURM tests (tests/e2e/slurm/): the fault named by argv[1] happens on node 1
(torchrun's GROUP_RANK), on its first rank: healthy | conditional | crash | long. argv[2], when given, is the
seconds each step sleeps (so that two jobs overlap, or a node can be killed mid-training)."""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    mode = sys.argv[1]
    pause = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    dist.init_process_group("gloo")
    faulty = os.environ.get("GROUP_RANK") == "1" and os.environ.get("LOCAL_RANK") == "0"
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = 600 if mode == "long" else 12
    for step in range(steps):
        loss = model(torch.randn(4, 8)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if pause:
            time.sleep(pause)
        if mode == "long" and faulty and step == 3:
            print(f"DDPD-TRAINING {time.time():.3f}", flush=True)  # the tests kill a node once it trains
        if mode == "crash" and faulty and step == 6:
            print(f"DDPD-FAULT {time.time():.3f}", flush=True)  # when: the tests time the verdict from here
            raise RuntimeError("bad batch on node 1")  # CRASH
    if mode == "conditional" and faulty:
        print(f"DDPD-FAULT {time.time():.3f}", flush=True)
        dist.all_reduce(torch.ones(1))  # EXTRA: only node 1's first rank reduces its loss
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
