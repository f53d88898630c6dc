"""Two nodes of one rank each; a barrier that only global rank 0 reaches (used by test_multinode.py)."""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(20):
        loss = model(torch.randn(4, 8)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    if rank == 0:
        dist.barrier()  # EXTRA: only rank 0 gets here
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
