"""Check probe: the official DDP tutorial's Trainer (CPU, gloo) with its ``set_epoch`` line deleted. Every
epoch still peeks one batch (``next(iter(loader))``) before the real loop; without set_epoch every real
loop draws the same order.

Expected finding: data.missing-set-epoch, ranks 0 and 1, at the lines marked SAMPLER and LOOP.
Command: check
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class Pairs(Dataset):
    def __init__(self, size):
        g = torch.Generator().manual_seed(3)
        self.items = [(torch.rand(20, generator=g), torch.rand(1, generator=g)) for _ in range(size)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


class Trainer:
    def __init__(self, model, loader, optimizer):
        self.model = DDP(model)
        self.loader = loader
        self.optimizer = optimizer

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        F.mse_loss(self.model(source), targets).backward()
        self.optimizer.step()

    def _run_epoch(self, epoch):
        batch = len(next(iter(self.loader))[0])
        print(f"[rank {dist.get_rank()}] epoch {epoch}: batch size {batch}, {len(self.loader)} steps")
        for source, targets in self.loader:  # LOOP
            self._run_batch(source, targets)

    def train(self, epochs):
        for epoch in range(epochs):
            self._run_epoch(epoch)


def main():
    dist.init_process_group("gloo")
    data = Pairs(192)
    model = torch.nn.Linear(20, 1)
    loader = DataLoader(data, batch_size=16, shuffle=False, sampler=DistributedSampler(data))  # SAMPLER
    Trainer(model, loader, torch.optim.SGD(model.parameters(), lr=1e-3)).train(3)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
