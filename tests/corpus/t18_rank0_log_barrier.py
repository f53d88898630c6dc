"""Tricky but healthy. Rank 0 alone writes a JSON-lines metrics log and a checkpoint each epoch (with
nothing collective inside the branch); every rank then meets at a barrier before the next epoch.

    torchrun --nproc-per-node 2 t18_rank0_log_barrier.py --epochs 3
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--log_dir", default="logs_t18")
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(128, 6), torch.randn(128, 2))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    model = DDP(torch.nn.Linear(6, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    if rank == 0:
        os.makedirs(args.log_dir, exist_ok=True)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        t0, last = time.time(), 0.0
        for x, y in loader:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            last = loss.item()
        if rank == 0:
            with open(os.path.join(args.log_dir, "metrics.jsonl"), "a") as f:
                f.write(json.dumps({"epoch": epoch, "loss": last, "secs": time.time() - t0}) + "\n")
            torch.save({"model": model.module.state_dict(), "epoch": epoch}, os.path.join(args.log_dir, "last.pt"))
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
