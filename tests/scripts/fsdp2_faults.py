"""An FSDP2 job (``fully_shard`` on each block and on the root, a 1-D CPU mesh, 2 ranks) with a fault planted
by ``--fault``: ``skip`` (rank 1 leaves out the last block's forward at step 5: its all-gathers and
reduce-scatters part from rank 0's), ``metric`` (rank 0 alone all-reduces a metric at step 4), ``crash``
(rank 1 raises at step 4), ``none`` (healthy). FSDP2 in torch 2.13 calls ``all_gather_single`` and
``reduce_scatter_single``, names the tool's collective wrappers do not hold: only torch's flight recorder
sees them."""

import argparse

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

parser = argparse.ArgumentParser()
parser.add_argument("--fault", default="none", choices=["none", "skip", "metric", "crash"])
parser.add_argument("--steps", type=int, default=8)
opts = parser.parse_args()


class Stack(torch.nn.Module):
    def __init__(self, leave_out_last: bool) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(3))
        self.leave_out_last = leave_out_last
        self.step = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            if self.leave_out_last and self.step == 5 and i == last:
                continue
            x = torch.relu(block(x))  # FORWARD
        return x


mesh = init_device_mesh("cpu", (2,))
rank = dist.get_rank()
torch.manual_seed(0)
model = Stack(leave_out_last=opts.fault == "skip" and rank == 1)
for block in model.blocks:
    fully_shard(block, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(opts.steps):
    model.step = step
    loss = model(torch.randn(4, 16)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    if opts.fault == "metric" and rank == 0 and step == 4:
        dist.all_reduce(loss.detach().clone())  # METRIC
    if opts.fault == "crash" and rank == 1 and step == 4:
        raise RuntimeError("planted failure at step 4")  # CRASH
dist.destroy_process_group()
