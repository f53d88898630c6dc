"""An FSDP2 job under plain torchrun with its own watchdog (tests/frjobs/frjob.py's): blocks sharded with
``fully_shard`` on a 1-D CPU mesh. Cases (argv[1]): ``skip`` (rank 1 leaves out the last block's forward at
step 3: SKIPPED), ``metric`` (rank 0 alone all-reduces its loss at step 2: METRIC), ``healthy``. A step that
lasts longer than the watchdog's stall makes every rank dump its flight recorder."""

import sys
import time

import torch
import torch.distributed as dist
from frjob import job_main
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


class Blocks(torch.nn.Module):
    def __init__(self, rank: int, case: str) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(3))
        self.drop_last_at = 3 if case == "skip" and rank == 1 else -1
        self.step = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            if self.step == self.drop_last_at and i == 2:
                continue
            x = layer(x).tanh()  # SKIPPED
        return x


def train(case: str, rank: int, progress: list) -> None:
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(0)
    net = Blocks(rank, case)
    for layer in net.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(net, mesh=mesh)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for step in range(6):
        progress[0] = time.monotonic()  # the step's collectives are FSDP's own: watched from the step's start
        net.step = step
        loss = net(torch.randn(2, 8)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if case == "metric" and rank == 0 and step == 2:
            dist.all_reduce(loss.detach())  # METRIC
        progress[0] = None
    progress[0] = time.monotonic()


if __name__ == "__main__":
    sys.exit(job_main(train))
