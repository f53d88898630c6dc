"""Rank 0 alone all-reduces an epoch metric (inside `if rank == 0:`); every rank then meets at a barrier.

The others' barrier meets rank 0's extra all_reduce: the job stops there. Ranks named by EXTRA_RANKS
(comma list, default "0") make the extra call.
"""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def epoch_end(rank, extra, total):
    if rank in extra:  # GUARD
        dist.all_reduce(total)  # EXTRA
    dist.barrier()  # BARRIER


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    extra = {int(x) for x in os.environ.get("EXTRA_RANKS", "0").split(",")}
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(6, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        total = torch.zeros(1)
        for _ in range(3):
            loss = model(torch.randn(5, 6)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.detach()
        if epoch == 1:
            epoch_end(rank, extra, total)  # CALL
        else:
            dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
