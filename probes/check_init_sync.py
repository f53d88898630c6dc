"""Check probe: each rank seeds with its rank and DDP is told not to broadcast the initial weights.

Expected finding: drift.init-mismatch, ranks 0 and 1, at the lines marked SEED and WRAP.
Command: check
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)  # SEED
    model = DDP(torch.nn.Linear(8, 1), init_sync=False)  # WRAP
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(5):
        model(torch.randn(4, 8)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
