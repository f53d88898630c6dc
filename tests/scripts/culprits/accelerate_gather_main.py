"""Accelerate: the main process alone gathers a metric (`accelerator.gather`) at the end of an epoch,
then every process waits in `accelerator.wait_for_everyone()`."""

import torch
from accelerate import Accelerator


def main():
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model, opt = accelerator.prepare(model, opt)
    for epoch in range(2):
        for _ in range(3):
            loss = model(torch.randn(5, 6)).pow(2).mean()
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
        if accelerator.is_main_process:  # GUARD
            seen = accelerator.gather(loss.detach().reshape(1))  # EXTRA
            accelerator.print(epoch, seen)
        accelerator.wait_for_everyone()  # BARRIER


if __name__ == "__main__":
    main()
