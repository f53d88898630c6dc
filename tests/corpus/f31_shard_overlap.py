"""Fault: no DistributedSampler. The tutorial's prepare_dataloader with shuffle=True and the sampler
forgotten: every rank trains on the whole data set (the same samples on every rank, in different
orders), so an epoch is world_size times the data.

Expected (check): data.shard-overlap on every rank, at the DataLoader (FAULT).
    torchrun --nproc-per-node 2 f31_shard_overlap.py 2 1 --batch_size 32
"""

import argparse
import os

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset


class MyTrainDataset(Dataset):
    def __init__(self, size):
        g = torch.Generator().manual_seed(2)
        self.data = [(torch.rand(20, generator=g), torch.rand(1, generator=g)) for _ in range(size)]

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return self.data[index]


def prepare_dataloader(dataset, batch_size):
    return DataLoader(dataset, batch_size=batch_size, pin_memory=False, shuffle=True)  # FAULT


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every):
        self.gpu_id = int(os.environ["LOCAL_RANK"])
        self.model = DDP(model)
        self.train_data, self.optimizer, self.save_every = train_data, optimizer, save_every

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            for source, targets in self.train_data:
                self.optimizer.zero_grad()
                F.mse_loss(self.model(source), targets).backward()
                self.optimizer.step()
            if self.gpu_id == 0 and epoch % self.save_every == 0:
                torch.save(self.model.module.state_dict(), "checkpoint_f31.pt")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("total_epochs", type=int)
    p.add_argument("save_every", type=int)
    p.add_argument("--batch_size", default=32, type=int)
    a = p.parse_args()
    init_process_group(backend="gloo")
    torch.manual_seed(0)
    model = torch.nn.Linear(20, 1)
    loader = prepare_dataloader(MyTrainDataset(256), a.batch_size)
    Trainer(model, loader, torch.optim.SGD(model.parameters(), lr=1e-3), a.save_every).train(a.total_epochs)
    destroy_process_group()


if __name__ == "__main__":
    main()
