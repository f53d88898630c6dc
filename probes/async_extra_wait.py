"""Fault probe: asynchronous collectives that cannot match. Every few steps each rank starts an
all_reduce of its metrics with async_op=True and keeps the Work; rank 0 also starts one for a debug
counter. Both ranks wait on their Works later, in a helper method, so neither sits inside a collective
call when it blocks: the wait is at WAIT, the extra collective at EXTRA.

Expected finding: hang.rank-conditional-collective, culprit rank 0 at EXTRA.
Self-test: --timeout 10
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Metrics:
    def __init__(self):
        self.works = []

    def start(self, rank, values):
        self.works.append(dist.all_reduce(values, async_op=True))
        if rank == 0:
            self.works.append(dist.all_reduce(torch.ones(3), async_op=True))  # EXTRA

    def finish(self):
        for w in self.works:
            w.wait()  # WAIT
        self.works = []


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    metrics = Metrics()
    for step in range(40):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 5 == 4:
            metrics.start(rank, torch.tensor([loss.item(), 1.0, float(step)]))
        if step % 5 == 1 and step > 5:
            metrics.finish()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
