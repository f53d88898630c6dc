"""Memleak probe: the DDP tutorial's Trainer (pytorch/examples, ddp-tutorial-series, on CPU/gloo) with one
line added: `_run_batch` keeps each step's loss in `self.losses`, with its autograd graph, on every rank.

Expected finding: memleak.autograd-graph, ranks 0 and 1, held by self.losses at the line marked KEEP.
Command: memleak
Self-test: -- 4

`--keep none` is the tutorial as written (healthy); `--keep item` stores `loss.item()` (healthy).
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
        self.size = size
        self.data = [(torch.rand(20), torch.rand(1)) for _ in range(size)]

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return self.data[index]


class Trainer:
    def __init__(self, model, train_data, optimizer, keep):
        self.gpu_id = int(os.environ.get("LOCAL_RANK", "0"))
        self.model = DDP(model)
        self.train_data = train_data
        self.optimizer = optimizer
        self.keep = keep
        self.losses = []

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.mse_loss(output, targets)
        loss.backward()
        self.optimizer.step()
        if self.keep == "loss":
            self.losses.append(loss)  # KEEP: keeps every step's graph (should be loss.item())
        elif self.keep == "item":
            self.losses.append(loss.item())

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        for source, targets in self.train_data:
            self._run_batch(source, targets)

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("total_epochs", type=int, nargs="?", default=4)
    ap.add_argument("--batch_size", type=int, default=32)
    ap.add_argument("--keep", choices=("loss", "item", "none"), default="loss")
    args = ap.parse_args()
    init_process_group(backend="gloo")
    dataset = MyTrainDataset(2048)
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = DataLoader(dataset, batch_size=args.batch_size, shuffle=False, sampler=DistributedSampler(dataset))
    Trainer(model, data, optimizer, args.keep).train(args.total_epochs)
    destroy_process_group()


if __name__ == "__main__":
    main()
