"""A DDP job whose script sets a bucket size far from a good one: ``bucket_cap_mb=1`` on 48 layers of
256x256 (12 buckets of ~1 MB where DDP's default makes one). On gloo on a 2-core machine the bucket size
makes no difference beyond the noise between identical runs (docs/how-it-works.md), so
tests/e2e/test_tune.py checks that each sweep arm really ran with its own bucket size, not a verdict."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(48)])
    model = DDP(net, bucket_cap_mb=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    x = torch.randn(32, 256)
    for _ in range(100_000):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
