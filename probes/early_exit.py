"""Fault probe: per-rank early stopping. Rank 1 decides on its own to stop after 3 steps and leaves
the loop; rank 0 goes on into the next DDP step and waits for a peer that is gone.

Expected finding: hang.early-exit, diverged rank 1 (its last collective before it left at STOP).
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
    for step in range(8):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()  # STEP
        opt.step()
        opt.zero_grad()
        best = torch.tensor([float(step)])
        dist.all_reduce(best, op=dist.ReduceOp.MAX)  # LAST
        if rank == 1 and step == 2:
            break  # STOP: a local early-stopping decision
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
