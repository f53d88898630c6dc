"""Healthy. The tutorial's multigpu.py style: ranks started with torch.multiprocessing.spawn,
MASTER_ADDR/MASTER_PORT set by the script (a free port, or CORPUS_MASTER_PORT from the environment),
init_process_group(rank=..., world_size=...), rank-0 checkpoint.

    python h03_spawn_multigpu.py 2 1 --batch_size 32 --world_size 2
"""

import argparse
import os
import socket

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_setup(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    init_process_group(backend="gloo", rank=rank, world_size=world_size)


class Trainer:
    def __init__(self, model, train_data, optimizer, rank, save_every):
        self.rank = rank
        self.model = DDP(model)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        for source, targets in self.train_data:
            self.optimizer.zero_grad()
            F.mse_loss(self.model(source), targets).backward()
            self.optimizer.step()

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)
            if self.rank == 0 and epoch % self.save_every == 0:
                torch.save(self.model.module.state_dict(), "checkpoint_h03.pt")
                print(f"epoch {epoch} | checkpoint saved")


def main(rank, world_size, port, total_epochs, save_every, batch_size):
    ddp_setup(rank, world_size, port)
    torch.manual_seed(0)
    data = TensorDataset(torch.rand(512, 20), torch.rand(512, 1))
    loader = DataLoader(data, batch_size=batch_size, shuffle=False, sampler=DistributedSampler(data))
    model = torch.nn.Linear(20, 1)
    Trainer(model, loader, torch.optim.SGD(model.parameters(), lr=1e-3), rank, save_every).train(total_epochs)
    destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("total_epochs", type=int)
    p.add_argument("save_every", type=int)
    p.add_argument("--batch_size", default=32, type=int)
    p.add_argument("--world_size", default=2, type=int)
    a = p.parse_args()
    port = int(os.environ.get("CORPUS_MASTER_PORT") or free_port())
    mp.spawn(main, args=(a.world_size, port, a.total_epochs, a.save_every, a.batch_size), nprocs=a.world_size)
