"""Check probe (healthy): the official DDP tutorial's Trainer, on CPU with gloo. Every epoch it peeks one
batch to print the batch size (``next(iter(loader))``, which iterates the DistributedSampler once more),
then calls ``set_epoch(epoch)`` and runs the real loop; rank 0 saves a snapshot every other epoch.
The sampler sees epochs 0, 0, 0, 1, 1, 2: only the real loops are epochs, and they differ.

Expected findings: none
Command: check
"""

import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class Pairs(Dataset):
    """Fixed random (input, target) pairs, the same on every rank."""

    def __init__(self, size):
        g = torch.Generator().manual_seed(3)
        self.items = [(torch.rand(20, generator=g), torch.rand(1, generator=g)) for _ in range(size)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


class Trainer:
    def __init__(self, model, loader, optimizer, save_every, snapshot):
        self.rank = dist.get_rank()
        self.model = DDP(model)
        self.loader = loader
        self.optimizer = optimizer
        self.save_every = save_every
        self.snapshot = snapshot

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        F.mse_loss(self.model(source), targets).backward()
        self.optimizer.step()

    def _run_epoch(self, epoch):
        batch = len(next(iter(self.loader))[0])  # PEEK
        print(f"[rank {self.rank}] epoch {epoch}: batch size {batch}, {len(self.loader)} steps")
        self.loader.sampler.set_epoch(epoch)
        for source, targets in self.loader:  # LOOP
            self._run_batch(source, targets)

    def train(self, epochs):
        for epoch in range(epochs):
            self._run_epoch(epoch)
            if self.rank == 0 and epoch % self.save_every == 0:
                torch.save({"model": self.model.module.state_dict(), "epochs": epoch}, self.snapshot)


def main():
    dist.init_process_group("gloo")
    data = Pairs(192)
    model = torch.nn.Linear(20, 1)
    loader = DataLoader(data, batch_size=16, shuffle=False, sampler=DistributedSampler(data))  # SAMPLER
    with tempfile.TemporaryDirectory() as tmp:
        Trainer(model, loader, torch.optim.SGD(model.parameters(), lr=1e-3), 2, os.path.join(tmp, "snap.pt")).train(3)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
