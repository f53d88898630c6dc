"""Two ranks on gloo; at step 3 only rank 0 makes an extra all_reduce: a rank-conditional collective, a
deadlock on every attempt. tests/e2e/test_elastic.py runs it with --max-restarts 2."""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"rank {rank} on attempt {os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}")
x = torch.ones(4)
for step in range(10):
    if rank == 0 and step == 3:
        dist.all_reduce(torch.zeros(2))  # EXTRA
    dist.all_reduce(x)  # STEP
dist.destroy_process_group()
