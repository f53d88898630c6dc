"""A small, correct DDP training program: the default workload of every ddpdoctor command.

DistributedSampler with set_epoch, the same seed on every rank, a rank-0 checkpoint behind a barrier.
Expected findings: none.
"""

import argparse
import os
import tempfile

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()

    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = (
        torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if torch.cuda.is_available() else torch.device("cpu")
    )
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(args.samples, 16), torch.randn(args.samples, 1))
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        total = torch.zeros(1, device=device)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            total += loss.detach()
        dist.all_reduce(total)
        if rank == 0:
            print(f"epoch {epoch}: mean loss {total.item() / (len(loader) * world):.4f}")
    if rank == 0:
        with tempfile.TemporaryDirectory() as d:
            torch.save(model.module.state_dict(), os.path.join(d, "checkpoint.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
