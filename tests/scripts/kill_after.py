"""Rank 1 is SIGKILLed right after its 20th all_reduce returned (no end line is written for a routine
call: only the counters say it returned); rank 0 then waits in the barrier until it is ended."""

import os
import signal

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(4)
for step in range(20):
    dist.all_reduce(t)  # ROUTINE
if dist.get_rank() == 1:
    os.kill(os.getpid(), signal.SIGKILL)  # KILLED
dist.barrier()  # WAITS
dist.destroy_process_group()
