"""Tricky but healthy. The data set was sharded offline: shard_<k>.pt files, one per rank. Rank 0
creates them if missing (standing in for the preprocessing job), everyone waits at a barrier, then each
rank reads only its own shard with a plain shuffling DataLoader: no DistributedSampler is needed.

    torchrun --nproc-per-node 2 t19_presharded.py --epochs 2
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset


def preprocess(out_dir, shards, per_shard):
    os.makedirs(out_dir, exist_ok=True)
    for k in range(shards):
        g = torch.Generator().manual_seed(1000 + k)
        x = torch.randn(per_shard, 12, generator=g)
        torch.save({"x": x, "y": x[:, :3].sum(1, keepdim=True)}, os.path.join(out_dir, f"shard_{k:05d}.pt"))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--data_dir", default="shards_t19")
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0 and not os.path.exists(os.path.join(args.data_dir, f"shard_{world - 1:05d}.pt")):
        preprocess(args.data_dir, world, 128)
    dist.barrier()
    shard = torch.load(os.path.join(args.data_dir, f"shard_{rank:05d}.pt"))
    loader = DataLoader(TensorDataset(shard["x"], shard["y"]), batch_size=args.batch_size, shuffle=True)
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(), torch.nn.Linear(24, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(args.epochs):
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        if rank == 0:
            print(f"epoch {epoch} done")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
