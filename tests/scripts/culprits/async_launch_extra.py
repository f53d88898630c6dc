"""One extra asynchronous collective on rank 0 through a generic helper: every rank launches its async
calls from the same helper line, so the extra all_reduce and the others' all_gather share a call site.
Rank 0 reaches the extra one from a rank-0-only line; every rank then blocks in `w.wait()`."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Async:
    def __init__(self):
        self.works = []

    def launch(self, fn, *args):
        self.works.append(fn(*args, async_op=True))  # LAUNCH

    def wait_all(self):
        for w in self.works:
            w.wait()  # WAIT
        self.works = []


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    comm = Async()
    for step in range(12):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and step == 5:  # GUARD
            comm.launch(dist.all_reduce, torch.ones(2))  # CALL
        comm.launch(dist.all_gather, [torch.zeros(1) for _ in range(world)], loss.detach().reshape(1))
        if step % 2 == 1:
            comm.wait_all()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
