"""Fault: forgotten set_epoch. The tutorial's torchrun Trainer, but _run_epoch never calls
train_data.sampler.set_epoch(epoch): the DistributedSampler shuffles every epoch in the same order.

Expected: data.missing-set-epoch on every rank, at the training loop (line marked FAULT).
    torchrun --nproc-per-node 2 f21_tutorial_no_set_epoch.py 3 2 --batch_size 32
"""

import argparse
import os

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class MyTrainDataset(Dataset):
    def __init__(self, size):
        g = torch.Generator().manual_seed(11)
        self.data = [(torch.rand(20, generator=g), torch.rand(1, generator=g)) for _ in range(size)]

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return self.data[index]


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every):
        self.gpu_id = int(os.environ["LOCAL_RANK"])
        self.model = DDP(model)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch):
        b_sz = len(next(iter(self.train_data))[0])
        print(f"[rank{self.gpu_id}] Epoch {epoch} | Batchsize: {b_sz} | Steps: {len(self.train_data)}")
        for source, targets in self.train_data:  # FAULT: no self.train_data.sampler.set_epoch(epoch) before
            self._run_batch(source, targets)

    def _save_checkpoint(self, epoch):
        torch.save(self.model.module.state_dict(), "checkpoint_f21.pt")
        print(f"Epoch {epoch} | Training checkpoint saved")

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)
            if self.gpu_id == 0 and epoch % self.save_every == 0:
                self._save_checkpoint(epoch)


def main(total_epochs, save_every, batch_size):
    init_process_group(backend="gloo")
    torch.manual_seed(0)
    dataset = MyTrainDataset(384)
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, sampler=DistributedSampler(dataset))
    Trainer(model, loader, optimizer, save_every).train(total_epochs)
    destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description="simple distributed training job")
    p.add_argument("total_epochs", type=int)
    p.add_argument("save_every", type=int)
    p.add_argument("--batch_size", default=32, type=int)
    a = p.parse_args()
    main(a.total_epochs, a.save_every, a.batch_size)
