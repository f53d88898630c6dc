"""An FSDP2 training job for the step notion (issue 51): a stack of blocks, each sharded with ``fully_shard``
and the root too, on a 1-D CPU mesh, SGD, ``--steps`` steps (default 40). ``--slow-rank R`` makes rank R
sleep 30 ms in its forward after the blocks ran (the straggler line, SLOW): its peer, past its own forward,
waits in backward for R's all-gathers and reduce-scatters."""

import argparse
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--slow-rank", type=int, default=-1)
opts = parser.parse_args()


class Stack(torch.nn.Module):
    def __init__(self, slow: bool) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(3))
        self.head = torch.nn.Linear(32, 1)
        self.slow = slow

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.relu(block(x))
        if self.slow:
            time.sleep(0.03)  # SLOW
        return self.head(x)


mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
rank = dist.get_rank()
torch.manual_seed(0)
model = Stack(slow=rank == opts.slow_rank)
for block in model.blocks:
    fully_shard(block, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(opts.steps):
    loss = model(torch.randn(8, 32)).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
