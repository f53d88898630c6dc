"""Fault: a straggler inside backward. Rank 1's model uses a custom autograd Function whose backward
recomputes an expensive correction (here: ~40 ms of work) every step. DDP's gradient all-reduce makes
every rank's backward as long as the slowest one's, so the step breakdown looks even on both ranks.

Expected: profile.straggler (warning), culprit rank 1, at the slow line in backward (FAULT).
    torchrun --nproc-per-node 2 f43_custom_backward_straggler.py --steps 200
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Corrected(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, heavy):
        ctx.heavy = heavy
        return torch.tanh(x)

    @staticmethod
    def backward(ctx, g):
        if ctx.heavy:
            time.sleep(0.04)  # FAULT
        return g, None


class Block(nn.Module):
    def __init__(self, heavy):
        super().__init__()
        self.inp, self.out, self.heavy = nn.Linear(16, 16), nn.Linear(16, 2), heavy

    def forward(self, x):
        return self.out(Corrected.apply(self.inp(x), self.heavy))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(Block(heavy=rank == 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        x = torch.randn(8, 16)
        loss = nn.functional.cross_entropy(model(x), (x[:, 0] > 0).long())
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
