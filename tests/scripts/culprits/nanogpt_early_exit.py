"""nanoGPT-style: the training loop at module level. Rank 1 stops on its own when its loss looks good
enough and breaks out of the loop; rank 0 goes on into the next DDP step, whose all-reduce cannot finish."""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
ddp_rank = int(os.environ["RANK"])
master_process = ddp_rank == 0
torch.manual_seed(1337)
model = DDP(torch.nn.Linear(16, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
max_iters = int(os.environ.get("MAX_ITERS", "200"))
stop_at = int(os.environ.get("STOP_AT", "50"))

iter_num = 0
while True:
    x = torch.randn(8, 16)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    iter_num += 1
    if ddp_rank == 1 and iter_num >= stop_at:
        break  # STOP
    if iter_num > max_iters:
        break

dist.destroy_process_group()
