"""Fault: several ranks save one checkpoint path. The Trainer's save branch checks only the epoch, not
the rank, so every rank writes snapshot.pt at the same time.

Expected (check): checkpoint.multiple-writers on every rank, at the torch.save (FAULT).
    torchrun --nproc-per-node 2 f33_ckpt_all_ranks.py 2 1
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Trainer:
    def __init__(self, model, loader, optimizer, save_every, snapshot_path="snapshot_f33.pt"):
        self.model = DDP(model)
        self.loader, self.optimizer = loader, optimizer
        self.save_every, self.snapshot_path = save_every, snapshot_path

    def _save_snapshot(self, epoch):
        snapshot = {"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch}
        torch.save(snapshot, self.snapshot_path)  # FAULT: every rank writes the same file
        print(f"Epoch {epoch} | Training snapshot saved at {self.snapshot_path}")

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self.loader.sampler.set_epoch(epoch)
            for source, targets in self.loader:
                self.optimizer.zero_grad()
                F.mse_loss(self.model(source), targets).backward()
                self.optimizer.step()
            if epoch % self.save_every == 0:
                self._save_snapshot(epoch)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("total_epochs", type=int)
    p.add_argument("save_every", type=int)
    p.add_argument("--batch_size", default=32, type=int)
    a = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    data = TensorDataset(torch.rand(256, 20), torch.rand(256, 1))
    loader = DataLoader(data, batch_size=a.batch_size, sampler=DistributedSampler(data))
    model = torch.nn.Linear(20, 1)
    Trainer(model, loader, torch.optim.SGD(model.parameters(), lr=1e-3), a.save_every).train(a.total_epochs)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
