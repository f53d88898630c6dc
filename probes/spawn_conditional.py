"""Fault probe in the official tutorials' style: ranks started with torch.multiprocessing.spawn,
MASTER_ADDR/MASTER_PORT set in os.environ, setup(rank, world_size). Rank 0 makes an extra barrier.

ddpdoctor detects mp.spawn and probes the spawned ranks with no edit to the script.
Expected finding: hang.rank-conditional-collective, diverged rank 0 at EXTRA.
"""

import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def setup(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def train(rank, world_size, port):
    setup(rank, world_size, port)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(6):
        model(torch.randn(4, 8)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        if rank == 0 and step == 2:
            dist.barrier()  # EXTRA: only rank 0 waits here
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    world_size = 2
    mp.spawn(train, args=(world_size, free_port()), nprocs=world_size, join=True)
