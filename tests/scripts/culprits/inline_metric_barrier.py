"""The barrier shape written inline, as a new user would: `if rank == 0:` all_reduce, then barrier."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(6, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        seen = torch.zeros(1)
        for _ in range(3):
            loss = model(torch.randn(5, 6)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += 1
        if rank == 0:  # GUARD
            dist.all_reduce(seen)  # EXTRA
            print(f"epoch {epoch}: {seen.item()} batches")
        dist.barrier()  # BARRIER
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
