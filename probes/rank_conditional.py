"""Fault probe: a collective inside `if rank == 0:` (rank 0 all-reduces one metric more than the others).

The extra all_reduce has the same shape as the regular one, so gloo pairs it with the other ranks'
next all_reduce: no error, the ranks silently shift, and the job stops at the end where a barrier meets
an all_reduce. Plain tools blame the waiting rank and the last collective.

Expected finding: hang.rank-conditional-collective, diverged rank 0 at the line marked EXTRA.
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(4):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    correct = torch.zeros(1)
    for batch in range(6):  # validation: one metric all_reduce per batch
        correct += 1
        dist.all_reduce(correct)  # REGULAR
        if rank == 0 and batch == 2:
            dist.all_reduce(correct)  # EXTRA: only rank 0 makes this call
    dist.barrier()  # END
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
