"""Rank 1's custom autograd Function spends ~40 ms in its backward every step. DDP's gradient all-reduce
makes every rank's backward as long as the slowest one, so the step breakdown alone looks even."""

import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, slow):
        ctx.slow = slow
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        if ctx.slow:
            time.sleep(0.04)  # SLOW
        return grad * 2, None


class Net(torch.nn.Module):
    def __init__(self, slow):
        super().__init__()
        self.fc = torch.nn.Linear(32, 32)
        self.head = torch.nn.Linear(32, 1)
        self.slow = slow

    def forward(self, x):
        return self.head(Scale.apply(self.fc(x), self.slow))


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(Net(slow=rank == 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(400):
        loss = model(torch.randn(16, 32)).pow(2).mean()
        opt.zero_grad()
        loss.backward()  # BACKWARD
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
