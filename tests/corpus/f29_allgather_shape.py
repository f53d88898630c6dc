"""Fault: shape mismatch in an all_gather. Validation data are split by hand with tensor_split (no
DistributedSampler padding), so the ranks' last batches differ in size; predictions are gathered with
all_gather into buffers shaped like the local batch.

Expected: hang.shape-mismatch, at the all_gather (FAULT).
    torchrun --nproc-per-node 2 f29_allgather_shape.py
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch_size", type=int, default=16)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    x = torch.randn(160, 5)
    train = TensorDataset(x, x.sum(1, keepdim=True))
    xv = torch.randn(101, 5)
    val_x = torch.tensor_split(xv, world)[rank]  # 51 rows on rank 0, 50 on rank 1
    sampler = DistributedSampler(train)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    model = DDP(nn.Linear(5, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(xb), yb).backward()
            opt.step()
        all_preds = []
        with torch.no_grad():
            for xb in val_x.split(args.batch_size):
                preds = model(xb)
                gathered = [torch.zeros_like(preds) for _ in range(world)]
                dist.all_gather(gathered, preds)  # FAULT: last batch is 3 rows on rank 0, 2 on rank 1
                all_preds.append(torch.cat(gathered))
        if rank == 0:
            print(f"epoch {epoch}: {sum(t.shape[0] for t in all_preds)} predictions gathered")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
