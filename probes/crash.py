"""Fault probe: rank 1 raises in the middle of training; rank 0 then fails in its next all-reduce with
gloo's "Connection closed by peer" (a victim, not the cause).

Expected finding: crash.exception, rank 1 at the line marked RAISE; rank 0 a victim.
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def check_batch(x, rank, step):
    if rank == 1 and step == 3:
        raise ValueError(f"corrupt batch at step {step}")  # RAISE
    return x


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(8):
        x = check_batch(torch.randn(4, 8), rank, step)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
