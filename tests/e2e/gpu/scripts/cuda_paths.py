"""Three GPU memory behaviours, chosen by argv[1], one rank under NCCL:
- ``kept``: detached GPU tensors kept in a list every step (allocated grows: a leak, no graph);
- ``fragment``: tensors whose size changes every step, freed again (reserved may grow, allocated flat);
- ``healthy``: a steady loop."""

import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "healthy"
    dist.init_process_group("nccl")
    dev = torch.device("cuda", dist.get_rank() % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    model = DDP(torch.nn.Linear(512, 512).to(dev), device_ids=[dev.index])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    for step in range(200):
        n = 64 if mode != "fragment" else 64 + (step * 37) % 4096
        out = model(torch.randn(n, 512, device=dev))
        loss = out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if mode == "kept":
            kept.append(out.detach().clone())  # KEPT: 128 KiB of GPU memory per step
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
