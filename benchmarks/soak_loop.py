"""A long communication-heavy DDP loop for soak tests: DDP forward/backward plus one metric all_reduce per
step, for about ``--seconds`` (the ranks agree on when to stop through the metric all_reduce itself, so
every rank makes the same collectives)."""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=120.0)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64)))
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    x = torch.randn(16, 64)
    metric = torch.zeros(2)
    t0 = time.perf_counter()
    steps = 0
    while True:
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        metric[0] = loss.item()
        metric[1] = 1.0 if time.perf_counter() - t0 > args.seconds else 0.0
        dist.all_reduce(metric)
        steps += 1
        if metric[1] > 0:
            break
    print(f"RANK {dist.get_rank()} STEPS {steps} SECONDS {time.perf_counter() - t0:.1f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
