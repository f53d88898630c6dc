"""Accelerate, with a DataLoader that already has a DistributedSampler passed to accelerator.prepare: Accelerate
shards its batches again, so each rank trains on half of its shard (planted fault: data.shard-gaps)."""

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
    sampler = DistributedSampler(data, shuffle=True)  # FAULT
    train = DataLoader(data, batch_size=16, sampler=sampler)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt, train = accelerator.prepare(model, opt, train)
    for epoch in range(2):
        for x, y in train:
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
    accelerator.print("done")


if __name__ == "__main__":
    main()
