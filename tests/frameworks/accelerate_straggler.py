"""Accelerate with a planted straggler: the second process logs its metrics slowly between forward and
backward (a helper that sleeps)."""

import time

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


def log_metrics(accelerator, loss):
    if accelerator.process_index == 1:
        time.sleep(0.05)  # FAULT: slow logging on one process


def main():
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
    train = DataLoader(data, batch_size=16, shuffle=True)
    val = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=16)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt, train, val = accelerator.prepare(model, opt, train, val)
    for epoch in range(2):
        model.train()
        for x, y in train:
            loss = torch.nn.functional.mse_loss(model(x), y)
            log_metrics(accelerator, loss)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
        model.eval()
        losses = []
        for x, y in val:
            with torch.no_grad():
                out = model(x)
            losses.append(accelerator.gather_for_metrics(out))
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            print(epoch, len(losses))


if __name__ == "__main__":
    main()
