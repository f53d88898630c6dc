"""Healthy. The DDP tutorial series' torchrun trainer, rewritten for CPU/gloo: a Trainer class, a
DistributedSampler, a peek at the batch size with next(iter(...)) before set_epoch, snapshots saved by
rank 0 only every `save_every` epochs, and resume from the snapshot when one exists.

    torchrun --nproc-per-node 2 h01_tutorial_torchrun.py 3 1 --batch_size 32
"""

import argparse
import os

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class RandomPairs(Dataset):
    def __init__(self, size):
        g = torch.Generator().manual_seed(7)
        self.items = [(torch.rand(20, generator=g), torch.rand(1, generator=g)) for _ in range(size)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every, snapshot_path):
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.model = model
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.snapshot_path = snapshot_path
        self.epochs_run = 0
        if os.path.exists(snapshot_path):
            self._load_snapshot(snapshot_path)
        self.model = DDP(self.model)

    def _load_snapshot(self, path):
        snap = torch.load(path, map_location="cpu")
        self.model.load_state_dict(snap["MODEL_STATE"])
        self.epochs_run = snap["EPOCHS_RUN"]
        print(f"resuming from snapshot at epoch {self.epochs_run}")

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch):
        b_sz = len(next(iter(self.train_data))[0])
        print(f"[rank{self.local_rank}] epoch {epoch} | batch size {b_sz} | steps {len(self.train_data)}")
        self.train_data.sampler.set_epoch(epoch)
        for source, targets in self.train_data:
            self._run_batch(source, targets)

    def _save_snapshot(self, epoch):
        snap = {"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch + 1}
        torch.save(snap, self.snapshot_path)
        print(f"epoch {epoch} | snapshot saved at {self.snapshot_path}")

    def train(self, max_epochs):
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.local_rank == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch)


def load_train_objs(size):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    return RandomPairs(size), model, torch.optim.SGD(model.parameters(), lr=1e-2)


def main(total_epochs, save_every, batch_size, snapshot_path, size):
    init_process_group(backend="gloo")
    dataset, model, optimizer = load_train_objs(size)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, sampler=DistributedSampler(dataset))
    Trainer(model, loader, optimizer, save_every, snapshot_path).train(total_epochs)
    destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description="simple distributed training job")
    p.add_argument("total_epochs", type=int)
    p.add_argument("save_every", type=int)
    p.add_argument("--batch_size", default=32, type=int)
    p.add_argument("--snapshot_path", default="snapshot_h01.pt")
    p.add_argument("--size", default=512, type=int)
    a = p.parse_args()
    main(a.total_epochs, a.save_every, a.batch_size, a.snapshot_path, a.size)
