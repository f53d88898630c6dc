"""One small DDP job in the step shapes a user writes (issue 51: one notion of a step), 2 gloo ranks, 12
steps each (``--shape``): ``plain`` (forward, backward, optimizer step), ``accum`` (4 micro-batches under
no_sync, then the step), ``two_opts`` (two optimizers stepped one after the other), ``scaler`` (a
GradScaler whose every fourth step meets an inf gradient and is skipped), ``hand`` (a hand-written SGD
update, no optimizer). Each rank prints its loss sum at the end. ``--stall-after K``: each rank sleeps
(at most 120 s) after its K-th step, so that a ``--steps`` end finds every rank exactly there."""

import argparse
import contextlib
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--shape", default="plain", choices=["plain", "accum", "two_opts", "scaler", "hand"])
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--stall-after", type=int, default=0)
opts = parser.parse_args()

dist.init_process_group("gloo")
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
model = DDP(net)
first, second = list(net[0].parameters()), list(net[2].parameters())
opt = torch.optim.SGD(first if opts.shape == "two_opts" else net.parameters(), lr=0.01)
opt2 = torch.optim.SGD(second, lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=1.0, growth_interval=1000)
total = 0.0
for step in range(opts.steps):
    micro = 4 if opts.shape == "accum" else 1
    for i in range(micro):
        ctx = model.no_sync() if i < micro - 1 else contextlib.nullcontext()
        with ctx:
            loss = model(torch.randn(4, 8)).square().mean()
            if opts.shape == "scaler":
                scaler.scale(loss).backward()
            else:
                loss.backward()
        total += float(loss)
    if opts.shape == "scaler":
        if step % 4 == 3:
            net[0].weight.grad[0, 0] = float("inf")  # GradScaler finds it and skips this step
        scaler.step(opt)
        scaler.update()
    elif opts.shape == "hand":
        with torch.no_grad():
            for p in net.parameters():
                p -= 0.01 * p.grad
    else:
        opt.step()
        if opts.shape == "two_opts":
            opt2.step()
    for p in net.parameters():
        p.grad = None
    if step + 1 == opts.stall_after:
        time.sleep(120)  # STALL: the tool's --steps end comes first
print(f"rank {dist.get_rank()} loss sum {total:.3f}", flush=True)
dist.destroy_process_group()
