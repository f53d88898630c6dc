"""A trainer that keeps every step's loss tensor (with its graph) in `self.history`, on every rank, in a
loop of about 1 ms per step."""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, model, opt):
        self.model, self.opt = model, opt
        self.history = []

    def step(self, x):
        loss = self.model(x).square().mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.history.append(loss)  # LEAK
        return loss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=600)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(32, 8))
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.01))
    for _ in range(args.steps):
        trainer.step(torch.randn(4, 32))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
