"""Healthy. A streaming IterableDataset (records produced on the fly, as from a web-dataset or a
log stream), sharded by hand: record i goes to shard i % (world * workers), so each rank and each
DataLoader worker reads a disjoint slice; a shuffle buffer seeded by epoch; a fixed number of steps.

    torchrun --nproc-per-node 2 h08_iterable_stream.py --epochs 2 --num_workers 2
"""

import argparse
import random

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class RecordStream(IterableDataset):
    def __init__(self, num_records, rank, world_size, buffer_size=32):
        self.num_records, self.rank, self.world_size = num_records, rank, world_size
        self.buffer_size, self.epoch = buffer_size, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def _records(self):
        for i in range(self.num_records):
            g = torch.Generator().manual_seed(i)
            x = torch.randn(8, generator=g)
            yield i, x, x.sum(0, keepdim=True)

    def _shard(self):
        info = get_worker_info()
        workers, worker_id = (info.num_workers, info.id) if info else (1, 0)
        total = self.world_size * workers
        shard = self.rank * workers + worker_id
        for i, x, y in self._records():
            if i % total == shard:
                yield x, y

    def __iter__(self):
        rng = random.Random(self.epoch * 1000 + self.rank)
        buf = []
        for item in self._shard():
            buf.append(item)
            if len(buf) >= self.buffer_size:
                yield buf.pop(rng.randrange(len(buf)))
        rng.shuffle(buf)
        yield from buf


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--num_records", type=int, default=512)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--num_workers", type=int, default=2)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    stream = RecordStream(args.num_records, rank, world)
    loader = DataLoader(stream, batch_size=args.batch_size, num_workers=args.num_workers)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for epoch in range(args.epochs):
        stream.set_epoch(epoch)
        seen = torch.zeros(1)
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            seen += x.shape[0]
        dist.all_reduce(seen)
        if rank == 0:
            print(f"epoch {epoch}: {int(seen.item())} records")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
