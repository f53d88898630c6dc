"""Fault probe: asynchronous collectives that cannot match, and every rank blocked at a sync point
outside any collective call. Each step all ranks start an all_reduce of their metrics with
async_op=True; on its last step rank 0 also starts one for extra statistics (EXTRA); then every rank
broadcasts a stop flag from rank 0 asynchronously and waits for it at SYNC. Rank 0's extra all_reduce and
rank 1's broadcast meet at the same position of the group: neither can complete, both ranks block at
SYNC, and no rank sits inside a collective call.

Expected finding: hang.rank-conditional-collective, culprit rank 0 at EXTRA.
Self-test: --timeout 120
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    pending = []
    for step in range(8):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        pending.append(dist.all_reduce(torch.tensor([loss.item(), 1.0]), async_op=True))
        if rank == 0 and step == 7:
            pending.append(dist.all_reduce(torch.zeros(2), async_op=True))  # EXTRA
    stop = torch.zeros(1)
    pending.append(dist.broadcast(stop, 0, async_op=True))
    for w in pending:
        w.wait()  # SYNC
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
