"""Check probe: rank 0 edits a weight in place outside the optimizer: parameters diverge.

Expected finding: drift.parameters, ranks 0 and 1 (DDP constructed at the line marked WRAP).
Command: check
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1)))  # WRAP
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(25):
        model(torch.randn(4, 8)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        if rank == 0 and step == 12:
            with torch.no_grad():
                model.module[0].weight.clamp_(-0.1, 0.1)  # EDIT: only rank 0
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
