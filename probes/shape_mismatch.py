"""Fault probe: the same all_reduce with a different tensor size on each rank (a per-rank count of
classes seen). gloo aborts with "Received data size doesn't match" on one rank or both.

Expected finding: hang.shape-mismatch, ranks 0 and 1, both at the line marked GATHER.
"""

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for _ in range(3):
        dist.all_reduce(torch.ones(4))
    seen = torch.ones(3 + rank)  # each rank saw a different number of classes
    dist.all_reduce(seen)  # GATHER
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
