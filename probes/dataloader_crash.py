"""Fault probe: an exception inside a DataLoader worker process (Dataset.__getitem__) on rank 1.

Expected finding: crash.exception, rank 1, located at the worker's own line marked WORKER_RAISE.
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class Samples(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 13:
            raise KeyError(f"sample {i} is missing its label")  # WORKER_RAISE
        g = torch.Generator().manual_seed(i)
        return torch.randn(8, generator=g), torch.randn(1, generator=g)


def main():
    dist.init_process_group("gloo")
    data = Samples()
    sampler = DistributedSampler(data, shuffle=False)
    loader = DataLoader(data, batch_size=4, sampler=sampler, num_workers=1)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
