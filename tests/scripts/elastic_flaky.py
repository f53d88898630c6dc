"""Two ranks on gloo; rank 1 raises at step 5 on the first attempt of the worker group (or on every attempt
with --always), so that torchrun --max-restarts restarts the group. tests/e2e/test_elastic.py."""

import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
always = "--always" in sys.argv[1:]
x = torch.ones(4)
for step in range(10):
    dist.all_reduce(x)
    if rank == 1 and step == 5 and (always or attempt == 0):
        raise RuntimeError(f"flaky failure on attempt {attempt}")  # RAISE
dist.destroy_process_group()
print(f"rank {rank} done on attempt {attempt}")
