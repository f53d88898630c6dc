"""Profile probe: rank 1 is slower in the forward pass (an extra 15 ms of host work per step in its
model); rank 0 waits for it in the gradient all-reduce every step.

Expected finding: profile.straggler, rank 1 (the only culprit), phase forward, at the line marked SLOW;
rank 0 waiting at loss.backward().
Command: profile
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(torch.nn.Module):
    def __init__(self, slow_ms):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
        self.slow_ms = slow_ms

    def forward(self, x):
        if self.slow_ms:
            time.sleep(self.slow_ms / 1000)  # SLOW: only on the straggler
        return self.body(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--slow-ms", type=float, default=15.0)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(Net(args.slow_ms if rank == 1 else 0.0))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(args.steps):
        loss = model(torch.randn(32, 64)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
