"""Check probe: every rank saves the checkpoint to the same path.

Expected finding: checkpoint.multiple-writers, ranks 0 and 1, at the line marked SAVE.
Command: check
"""

import os
import tempfile

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    path = os.path.join(tempfile.gettempdir(), f"ddpdoctor-probe-{os.environ.get('TORCHELASTIC_RUN_ID', 'x')}.pt")
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        model(torch.randn(4, 8)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    torch.save(model.module.state_dict(), path)  # SAVE: no `if rank == 0`
    dist.barrier()
    if dist.get_rank() == 0:
        os.remove(path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
