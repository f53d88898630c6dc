"""Check probe: gradient accumulation over 4 micro-steps without model.no_sync(): DDP all-reduces the
gradients at every micro-step, 3 of 4 for nothing.

Expected finding: perf.grad-accum-no-sync, ranks 0 and 1, at the line marked STEP.
Command: check
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

ACCUM = 4


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(ACCUM * 6):
        (model(torch.randn(8, 64)).pow(2).mean() / ACCUM).backward()
        if (i + 1) % ACCUM == 0:
            opt.step()  # STEP
            opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
