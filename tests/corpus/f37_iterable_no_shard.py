"""Fault: a streaming IterableDataset that is not sharded by rank. Every rank reads the whole stream,
so all ranks train on the same records in the same order (DDP averages identical gradients).

Expected (check): data.shard-overlap, at the DataLoader (FAULT).
    torchrun --nproc-per-node 2 f37_iterable_no_shard.py --epochs 2
"""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset


class JsonLinesStream(IterableDataset):
    """Yields one (features, target) pair per line of a (synthetic) JSON-lines log."""

    def __init__(self, num_lines):
        self.num_lines = num_lines

    def __iter__(self):
        for i in range(self.num_lines):
            g = torch.Generator().manual_seed(i)
            x = torch.randn(8, generator=g)
            yield x, x[:2].sum(0, keepdim=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--num_lines", type=int, default=256)
    p.add_argument("--batch_size", type=int, default=16)
    args = p.parse_args()
    dist.init_process_group("gloo")
    loader = DataLoader(JsonLinesStream(args.num_lines), batch_size=args.batch_size)  # FAULT
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(args.epochs):
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
