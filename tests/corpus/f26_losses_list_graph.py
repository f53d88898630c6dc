"""Fault: a list that keeps every loss with its autograd graph. The Trainer appends the loss tensor
itself (not loss.item()) to self.losses for a loss curve at the end, on every rank.

Expected (memleak): memleak.autograd-graph on every rank, at the append (FAULT).
    torchrun --nproc-per-node 2 f26_losses_list_graph.py --epochs 6
"""

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Trainer:
    def __init__(self, model, loader, optimizer, step_ms):
        self.model = DDP(model)
        self.loader = loader
        self.optimizer = optimizer
        self.losses = []
        self.step_ms = step_ms

    def train_epoch(self, epoch):
        self.loader.sampler.set_epoch(epoch)
        for x, y in self.loader:
            self.optimizer.zero_grad()
            loss = nn.functional.mse_loss(self.model(x), y)
            loss.backward()
            self.optimizer.step()
            self.losses.append(loss)  # FAULT: keeps the graph (should be loss.item())
            time.sleep(self.step_ms / 1000)

    def fit(self, epochs):
        for epoch in range(epochs):
            self.train_epoch(epoch)
        curve = torch.stack(self.losses).detach()
        if dist.get_rank() == 0:
            print(f"first loss {curve[0]:.4f}, last loss {curve[-1]:.4f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--step_ms", type=float, default=5.0)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(640, 32), torch.randn(640, 4))
    loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data))
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    Trainer(model, loader, torch.optim.SGD(model.parameters(), lr=0.01), args.step_ms).fit(args.epochs)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
