"""Fault: rank 0 keeps its training outputs with their graphs. A Lightning-like on_train_batch_end
callback collects the model outputs for an epoch-end metric, only on the global-zero rank, without
detaching them.

Expected (memleak): memleak.autograd-graph, culprit rank 0 only, at the append (FAULT).
    torchrun --nproc-per-node 2 f27_rank0_outputs.py --steps 120
"""

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class CollectOutputs:
    def __init__(self, is_global_zero):
        self.is_global_zero = is_global_zero
        self.outputs = []

    def on_train_batch_end(self, outputs, targets):
        if self.is_global_zero:
            self.outputs.append(outputs["preds"])  # FAULT: not detached

    def on_train_epoch_end(self):
        if self.is_global_zero and self.outputs:
            print(f"epoch-end mean prediction {torch.cat(self.outputs).mean().item():.4f}")
        self.outputs.clear()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--step_ms", type=float, default=5.0)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    callback = CollectOutputs(rank == 0)
    g = torch.Generator().manual_seed(rank)
    for step in range(args.steps):
        x = torch.randn(16, 32, generator=g)
        preds = model(x)
        loss = preds.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        callback.on_train_batch_end({"loss": loss, "preds": preds}, None)
        time.sleep(args.step_ms / 1000)
    callback.on_train_epoch_end()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
