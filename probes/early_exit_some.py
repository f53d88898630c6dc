"""Fault probe: early stopping decided per rank, at four ranks. Ranks 1 and 3 see their own validation
loss stop improving, break out of the loop and wait in the final barrier; ranks 0 and 2 go on into
the next step's DDP all-reduce. The loop is left at STOP; the leavers wait at END.

Expected finding: hang.early-exit, culprit ranks 1 and 3.
Self-test: --nproc-per-node 4
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def fit(model, opt, rank, max_steps):
    best, patience = float("inf"), 0
    for step in range(max_steps):
        x = torch.randn(8, 6)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()  # STEP
        opt.step()
        val = 1.0 if rank % 2 else 1.0 / (step + 1)  # odd ranks stop improving at once
        if val < best:
            best, patience = val, 0
        else:
            patience += 1
        if patience >= 3:
            break  # STOP
    return best


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(6, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    fit(model, opt, rank, 50)
    dist.barrier()  # END
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
