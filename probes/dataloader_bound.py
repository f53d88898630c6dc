"""Profile probe: a Dataset whose __getitem__ is slow, read with num_workers=0: every step waits for data.

Expected finding: profile.dataloader-bound, ranks 0 and 1, at the sleep in __getitem__ (it runs in the
training process) and at the line marked LOOP (where the loop waits).
Command: profile
"""

import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class Slow(Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        time.sleep(0.002)  # decoding, augmentation, a remote read...
        g = torch.Generator().manual_seed(i)
        return torch.randn(16, generator=g), torch.randn(1, generator=g)


def main():
    dist.init_process_group("gloo")
    data = Slow()
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler, num_workers=0)
    model = DDP(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    sampler.set_epoch(0)
    for x, y in loader:  # LOOP
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
