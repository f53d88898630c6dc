"""Tricky but healthy. The first batch is peeked with next(iter(loader)) to size the model before any
set_epoch call (that iterator draws epoch 0's order and is thrown away); set_epoch is then called at the
top of every epoch as it should be.

    torchrun --nproc-per-node 2 t16_peek_shapes.py --epochs 3
"""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def build_model(example):
    features = example.shape[-1]
    return torch.nn.Sequential(torch.nn.Linear(features, 2 * features), torch.nn.ReLU(),
                               torch.nn.Linear(2 * features, 1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch_size", type=int, default=16)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(160, 7, generator=g), torch.randn(160, 1, generator=g))
    sampler = DistributedSampler(data, shuffle=True, seed=3)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    example, _ = next(iter(loader))
    torch.manual_seed(0)
    model = DDP(build_model(example))
    opt = torch.optim.SGD(model.parameters(), lr=0.02)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        if rank == 0:
            print(f"epoch {epoch} done")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
