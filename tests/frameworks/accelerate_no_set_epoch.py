"""Accelerate for the model only; the script shards its data with its own DistributedSampler and iterates it
without accelerator.prepare, so nobody calls set_epoch (planted fault: data.missing-set-epoch)."""

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(128, 8), torch.randn(128, 1))
    sampler = DistributedSampler(data, shuffle=True)  # FAULT
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt = accelerator.prepare(model, opt)
    for epoch in range(3):
        for x, y in loader:  # FAULT-LOOP
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
    accelerator.print("done")


if __name__ == "__main__":
    main()
