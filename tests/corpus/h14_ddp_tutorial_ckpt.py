"""Healthy. The "Getting started with DDP" tutorial's checkpoint demo under torchrun: rank 0 saves the
initial state, every rank waits at a barrier, then every rank loads it with map_location; a ToyModel
trained for a few steps; the checkpoint file is removed by rank 0 at the end behind another barrier.

    torchrun --nproc-per-node 2 h14_ddp_tutorial_ckpt.py
"""

import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def demo_checkpoint(rank, steps=10):
    print(f"Running DDP checkpoint example on rank {rank}.")
    model = ToyModel()
    ddp_model = DDP(model)
    CHECKPOINT_PATH = os.path.join(tempfile.gettempdir(), f"model_h14_{os.environ.get('TORCHELASTIC_RUN_ID', 'x')}"
                                   f"_{os.environ.get('MASTER_PORT', '0')}.checkpoint")
    if rank == 0:
        torch.save(ddp_model.state_dict(), CHECKPOINT_PATH)
    dist.barrier()
    map_location = {"cuda:0": "cpu"}
    ddp_model.load_state_dict(torch.load(CHECKPOINT_PATH, map_location=map_location, weights_only=True))
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    for _ in range(steps):
        optimizer.zero_grad()
        outputs = ddp_model(torch.randn(20, 10))
        labels = torch.randn(20, 5)
        loss_fn(outputs, labels).backward()
        optimizer.step()
    dist.barrier()
    if rank == 0:
        os.remove(CHECKPOINT_PATH)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    demo_checkpoint(rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
