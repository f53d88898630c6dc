"""Check probe: BatchNorm with broadcast_buffers=False: running statistics drift apart across ranks.

Expected finding: drift.buffers, ranks 0 and 1 (DDP constructed at the line marked WRAP).
Command: check
"""

import warnings

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model = DDP(net, broadcast_buffers=False)  # WRAP
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)  # each rank has its own data, as it should
    for _ in range(25):
        x = torch.randn(16, 8, generator=g) * (1 + rank)
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
