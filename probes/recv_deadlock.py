"""Fault probe: a deadlock outside any collective call. After a few steps each rank posts a receive from
the other (irecv returns at once) and waits on it in a helper; nobody ever sends. Neither rank is inside
a collective call while it blocks; each waits for an irecv its heartbeat knows to be incomplete, and no
rank has a send outstanding: certain within seconds, whatever --timeout is.

Expected finding: hang.p2p-deadlock, both ranks blocked at WAIT.
Self-test: --timeout 120
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def exchange(rank, t):
    work = dist.irecv(t, src=1 - rank)
    work.wait()  # WAIT
    return t


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(10):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    exchange(rank, torch.zeros(2))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
