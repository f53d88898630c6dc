"""Fault: an exception on one rank of an mp.spawn job (tutorial multigpu.py style, MASTER_ADDR/PORT set
by the script). Rank 1's gradient-norm guard raises after a few steps; rank 0 is left waiting.

Expected: crash.exception, culprit rank 1, at the raise (FAULT).
    python f38_spawn_exception.py --world_size 2
"""

import argparse
import os
import socket

import torch
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_setup(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    init_process_group(backend="gloo", rank=rank, world_size=world_size)


def check_grad_norm(model, rank, step, limit):
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
    if rank == 1 and step == 5:
        norm = norm * limit * 10  # stands in for a bad batch on this rank
    if norm > limit:
        raise RuntimeError(f"gradient norm {norm:.1f} above {limit} at step {step}")  # FAULT


def main(rank, world_size, port, steps):
    ddp_setup(rank, world_size, port)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        x = torch.randn(16, 10)
        loss = (model(x) - x[:, :1]).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        check_grad_norm(model, rank, step, limit=100.0)
        opt.step()
    destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--world_size", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    port = int(os.environ.get("CORPUS_MASTER_PORT") or free_port())
    mp.spawn(main, args=(a.world_size, port, a.steps), nprocs=a.world_size)
