"""Fault: nanoGPT-style training loop at module level (no main()), with a per-rank early stop. Each rank
checks its own smoothed loss and breaks out of the `while True` loop when it is below a target; rank 1's
data is easier, so it stops first and the other rank waits in its next DDP all-reduce.

Expected: hang.early-exit, culprit rank 1, at the early-stop `break` (FAULT).
    torchrun --nproc-per-node 2 f42_nanogpt_module_early_stop.py
"""

import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

ddp = int(os.environ.get("RANK", "-1")) != -1
dist.init_process_group(backend="gloo")
ddp_rank = int(os.environ["RANK"])
master_process = ddp_rank == 0
torch.manual_seed(1337 + ddp_rank)
block_size, n_embd, max_iters, target = 8, 16, 400, 0.05
model = nn.Sequential(nn.Embedding(32, n_embd), nn.Flatten(), nn.Linear(block_size * n_embd, 32))
model = DDP(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
noise = 0.0 if ddp_rank == 1 else 1.0   # rank 1's shard is easier


def get_batch():
    x = torch.randint(0, 32, (16, block_size))
    y = x[:, 0]
    return x, y


iter_num, smooth, t0 = 0, None, time.time()
while True:
    X, Y = get_batch()
    logits = model(X)
    loss = nn.functional.cross_entropy(logits, Y) * (1 + noise)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    smooth = loss.item() if smooth is None else 0.9 * smooth + 0.1 * loss.item()
    iter_num += 1
    if master_process and iter_num % 20 == 0:
        print(f"iter {iter_num}: loss {smooth:.4f}, {time.time() - t0:.1f}s")
    if smooth < target or (ddp_rank == 1 and iter_num >= 40):
        break  # FAULT
    if iter_num > max_iters:
        break

dist.destroy_process_group()
