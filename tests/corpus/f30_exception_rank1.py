"""Fault: an exception on rank 1 mid-training. The Dataset decodes records lazily and raises on a corrupt
one; the corrupt record lies in rank 1's shard (DistributedSampler without shuffling), so rank 1 raises
in its third batch and rank 0 fails in its next all-reduce as a victim.

Expected: crash.exception, culprit rank 1, at the raise (FAULT).
    torchrun --nproc-per-node 2 f30_exception_rank1.py
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class EncodedRecords(Dataset):
    def __init__(self, n, corrupt):
        g = torch.Generator().manual_seed(0)
        self.records = [torch.randn(9, generator=g).tolist() for _ in range(n)]
        for i in corrupt:
            self.records[i] = self.records[i][:5]

    def __len__(self):
        return len(self.records)

    def decode(self, idx):
        rec = self.records[idx]
        if len(rec) != 9:
            raise ValueError(f"record {idx} is truncated: {len(rec)} fields")  # FAULT
        return torch.tensor(rec[:8]), torch.tensor(rec[8:])

    def __getitem__(self, idx):
        return self.decode(idx)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=8)
    args = p.parse_args()
    dist.init_process_group("gloo")
    data = EncodedRecords(128, corrupt=[37])
    sampler = DistributedSampler(data, shuffle=False)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
