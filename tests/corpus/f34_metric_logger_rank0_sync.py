"""Fault: torchvision-style metrics synchronised on the master only. The MetricLogger's
synchronize_between_processes (a barrier and an all_reduce per meter) is called under
`if is_main_process():`, so rank 0 makes collectives that rank 1 never makes; rank 1 has gone on to
the next epoch's gradient all-reduce.

Expected: hang.rank-conditional-collective, culprit rank 0, at the guarded call (FAULT) or the
collective inside the helper (FAULT-INNER).
    torchrun --nproc-per-node 2 f34_metric_logger_rank0_sync.py --epochs 2
"""

import argparse
from collections import defaultdict

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class SmoothedValue:
    def __init__(self):
        self.total, self.count = 0.0, 0

    def update(self, value, n=1):
        self.total += value * n
        self.count += n

    def synchronize_between_processes(self):
        t = torch.tensor([self.count, self.total], dtype=torch.float64)
        dist.barrier()  # FAULT-INNER
        dist.all_reduce(t)
        self.count, self.total = int(t[0].item()), t[1].item()

    @property
    def global_avg(self):
        return self.total / max(1, self.count)


class MetricLogger:
    def __init__(self):
        self.meters = defaultdict(SmoothedValue)

    def update(self, **kw):
        for k, v in kw.items():
            self.meters[k].update(v)

    def synchronize_between_processes(self):
        for m in self.meters.values():
            m.synchronize_between_processes()


def is_main_process():
    return dist.get_rank() == 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=16)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(192, 8), torch.randint(0, 3, (192,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        metric_logger = MetricLogger()
        for x, y in loader:
            out = model(x)
            loss = nn.functional.cross_entropy(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            metric_logger.update(loss=loss.item(), acc=(out.argmax(1) == y).float().mean().item())
        if is_main_process():
            metric_logger.synchronize_between_processes()  # FAULT: only the master synchronises
            print(f"epoch {epoch}: loss {metric_logger.meters['loss'].global_avg:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
