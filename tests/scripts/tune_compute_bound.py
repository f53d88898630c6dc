"""A healthy compute-bound DDP job: few parameters (one 256x256 layer, applied 24 times per forward), much
arithmetic, no DataLoader: DDP's knobs have nothing to win here, and ``ddpdoctor tune`` must say "no change
beyond noise" (tests/e2e/test_tune.py)."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Deep(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(256, 256)

    def forward(self, x):
        for _ in range(24):
            x = torch.tanh(self.layer(x))
        return x


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(Deep())
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    x = torch.randn(128, 256)
    for _ in range(100_000):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
