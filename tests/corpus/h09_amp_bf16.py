"""Healthy. Mixed precision on CPU: autocast("cpu", dtype=torch.bfloat16) around the forward and the
loss, a GradScaler (torch.amp.GradScaler("cpu")) with unscale_ before gradient clipping, a linear warmup
LambdaLR, and an epoch-level metric reduced across ranks.

    torchrun --nproc-per-node 2 h09_amp_bf16.py --epochs 2 --amp
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Encoder(nn.Module):
    def __init__(self, dim=32, classes=5):
        super().__init__()
        self.proj = nn.Linear(12, dim)
        self.layer = nn.TransformerEncoderLayer(dim, nhead=4, dim_feedforward=64, batch_first=True, dropout=0.0)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        return self.head(self.layer(self.proj(x)).mean(dim=1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--amp", action="store_true", default=True)
    p.add_argument("--clip", type=float, default=1.0)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    x = torch.randn(256, 6, 12)
    y = torch.randint(0, 5, (256,))
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    model = DDP(Encoder())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    warmup = 5
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    scaler = torch.amp.GradScaler("cpu", enabled=args.amp)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        stats = torch.zeros(2)
        for xb, yb in loader:
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=args.amp):
                logits = model(xb)
                loss = nn.functional.cross_entropy(logits, yb)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            scaler.step(opt)
            scaler.update()
            sched.step()
            stats += torch.tensor([loss.item() * xb.shape[0], xb.shape[0]])
        dist.all_reduce(stats)
        if rank == 0:
            print(f"epoch {epoch}: loss {stats[0] / stats[1]:.4f} scale {scaler.get_scale():.0f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
