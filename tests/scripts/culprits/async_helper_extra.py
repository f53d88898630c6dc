"""One extra asynchronous all_reduce on rank 0, through a small helper, from a rank-0-only line.

Each rank all_gathers its loss asynchronously every step and waits on the Works a little later; rank 0
also logs a debug counter through the same helper at one step. Its extra all_reduce meets the other
ranks' next all_gather: every rank then blocks in `w.wait()`.
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Pending:
    def __init__(self):
        self.works = []

    def reduce(self, t):
        self.works.append(dist.all_reduce(t, async_op=True))  # EXTRA

    def gather(self, out, t):
        self.works.append(dist.all_gather(out, t, async_op=True))  # GATHER

    def drain(self):
        for w in self.works:
            w.wait()  # WAIT
        self.works = []


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    pending = Pending()
    for step in range(12):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and step == 5:
            pending.reduce(torch.ones(2))  # CALL
        pending.gather([torch.zeros(1) for _ in range(world)], loss.detach().reshape(1))
        if step % 2 == 1:
            pending.drain()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
