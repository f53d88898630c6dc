"""Fault probe: rank 1 stalls inside its training step, in its data-reading helper, at step 3 (a read
that never returns: a hung network filesystem, a stuck decoder), while rank 0 runs step 3 and waits in
DDP's all-reduce. Rank 1 never left its loop and never ran out of batches.

Expected finding: hang.timeout, culprit rank 1 busy at READ, rank 0 waiting.
Self-test: --timeout 3
"""

import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def read_batch(rank, step):
    if rank == 1 and step == 3:
        while True:
            time.sleep(0.05)  # READ
    return torch.randn(8, 16), torch.randn(8, 1)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(8):
        x, y = read_batch(rank, step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()  # STEP
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
