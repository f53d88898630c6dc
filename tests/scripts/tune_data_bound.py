"""A data-bound DDP job: every sample waits 4 ms on "I/O" (a sleep) in __getitem__, and the DataLoader has
num_workers=0, so the training process waits for each batch; the model is small. More workers overlap the
waits: ``ddpdoctor tune`` measures the gain (tests/e2e/test_tune.py)."""

import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class SlowReads(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        time.sleep(0.004)  # the read of one sample from slow storage
        return torch.full((32,), float(i % 7)), torch.tensor(float(i % 3))


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = SlowReads()
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data), num_workers=0)
    for x, y in loader:  # LOOP
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
