"""An FSDP1 training job (``FullyShardedDataParallel``, issue 51): a stack of blocks, each wrapped in its own
FSDP unit and the root too, on gloo CPU, SGD, ``--steps`` steps (default 40), ``--strategy`` one of torch's
``ShardingStrategy`` names (default FULL_SHARD); a hybrid strategy on a 2-D mesh of 1 replica of 2 shards
(manual wrapping with a hybrid strategy needs a process group or mesh).

FSDP1 on a CPU-only torch needs ``device_id=torch.device("cpu")``: with ``device_id=None`` its constructor
looks for an accelerator and raises ("FSDP needs a non-CPU accelerator device", torch 2.13)."""

import argparse

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--strategy", default="FULL_SHARD")
opts = parser.parse_args()


class Stack(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(3))
        self.head = torch.nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.relu(block(x))
        return self.head(x)


dist.init_process_group("gloo")
torch.manual_seed(0)
cpu = torch.device("cpu")
strategy = ShardingStrategy[opts.strategy]
kw = {}
if "HYBRID" in opts.strategy:
    from torch.distributed.device_mesh import init_device_mesh

    kw["device_mesh"] = init_device_mesh("cpu", (1, 2), mesh_dim_names=("replicate", "shard"))
model = Stack()
for i, block in enumerate(model.blocks):
    model.blocks[i] = FSDP(block, device_id=cpu, sharding_strategy=strategy, **kw)
model = FSDP(model, device_id=cpu, sharding_strategy=strategy, **kw)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(opts.steps):
    loss = model(torch.randn(8, 32)).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
