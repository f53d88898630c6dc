"""Fault: a collective in a rank-0-only branch. The Trainer stores the mean epoch loss in its snapshot
and computes it with dist.all_reduce inside _save_snapshot, which only rank 0 calls.

Expected: hang.rank-conditional-collective, culprit rank 0, at the all_reduce (FAULT) or the call in
the rank-0 branch (FAULT-CALLER).
    torchrun --nproc-per-node 2 f22_save_branch_allreduce.py 3 1 --batch_size 32
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every, snapshot_path):
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.model = DDP(model)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.snapshot_path = snapshot_path
        self.epoch_loss = torch.zeros(1)

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        self.epoch_loss.zero_()
        for source, targets in self.train_data:
            self.optimizer.zero_grad()
            loss = F.mse_loss(self.model(source), targets)
            loss.backward()
            self.optimizer.step()
            self.epoch_loss += loss.detach()

    def _save_snapshot(self, epoch):
        mean_loss = self.epoch_loss.clone()
        dist.all_reduce(mean_loss)  # FAULT: only rank 0 gets here
        mean_loss /= dist.get_world_size() * len(self.train_data)
        torch.save({"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch,
                    "LOSS": mean_loss.item()}, self.snapshot_path)
        print(f"Epoch {epoch} | snapshot saved (loss {mean_loss.item():.4f})")

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)
            if self.local_rank == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch)  # FAULT-CALLER


def main():
    p = argparse.ArgumentParser()
    p.add_argument("total_epochs", type=int)
    p.add_argument("save_every", type=int)
    p.add_argument("--batch_size", default=32, type=int)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    data = TensorDataset(torch.rand(256, 20), torch.rand(256, 1))
    loader = DataLoader(data, batch_size=args.batch_size, sampler=DistributedSampler(data))
    model = torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    Trainer(model, loader, torch.optim.SGD(model.parameters(), lr=1e-2), args.save_every,
            "snapshot_f22.pt").train(args.total_epochs)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
