"""A Dataset read by DataLoader workers, its samples kept either as a list of Python dicts (each worker's
reads touch the dicts' reference counts and copy their pages: pytorch/pytorch#13246) or as numpy arrays
(nothing Python-level to touch). One epoch of fast DDP steps on gloo.

    --store list|numpy   how the records are kept
    --workers N          DataLoader worker processes (0: read in the rank itself)
    --records N          how many records
    --epochs N           passes over them (``--persistent``: the same workers serve every pass)
"""

import argparse

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class Records(Dataset):
    def __init__(self, n, store):
        self.store = store
        if store == "list":
            self.records = [{"id": i, "x": i * 0.25, "tag": f"rec-{i}"} for i in range(n)]  # RECORDS
        else:
            self.ids = np.arange(n, dtype=np.int64)
            self.xs = np.arange(n, dtype=np.float64) * 0.25

    def __len__(self):
        return len(self.records) if self.store == "list" else len(self.ids)

    def __getitem__(self, i):
        if self.store == "list":
            r = self.records[i]
            return r["x"], float(r["id"] % 7)
        return float(self.xs[i]), float(self.ids[i] % 7)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", default="list", choices=["list", "numpy"])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--persistent", action="store_true")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    data = Records(args.records, args.store)
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(
        data, batch_size=args.batch, sampler=sampler, num_workers=args.workers, persistent_workers=args.persistent
    )
    model = DDP(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = (model(x.float().unsqueeze(1)).squeeze(1) - y.float() * 1e-3).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
