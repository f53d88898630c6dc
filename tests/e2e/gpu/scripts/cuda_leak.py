"""A CUDA leak: every step keeps its (graph-attached) loss on the GPU in a list."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("nccl")
    dev = torch.device("cuda", dist.get_rank() % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    model = DDP(torch.nn.Linear(256, 256).to(dev), device_ids=[dev.index])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    history = []
    for step in range(120):
        out = model(torch.randn(64, 256, device=dev))
        loss = out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(out)  # LEAK: the output and its graph stay on the GPU
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
