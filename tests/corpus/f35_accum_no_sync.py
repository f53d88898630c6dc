"""Fault (performance): gradient accumulation without no_sync(). A nanoGPT-like loop accumulates
gradients over micro-steps but lets DDP all-reduce after every micro-step (no model.no_sync() and no
require_backward_grad_sync = False): correct results, wasted communication.

Expected (check): perf.grad-accum-no-sync (warning), exit code 0, no error.
    torchrun --nproc-per-node 2 f35_accum_no_sync.py --max_iters 8 --grad_accum 4
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--max_iters", type=int, default=8)
    p.add_argument("--grad_accum", type=int, default=4)
    p.add_argument("--block_size", type=int, default=8)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    vocab = 32
    data = torch.randint(vocab, (5000,), generator=torch.Generator().manual_seed(1))
    model = DDP(nn.Sequential(nn.Embedding(vocab, 32), nn.Flatten(), nn.Linear(32 * args.block_size, vocab)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    torch.manual_seed(100 + rank)

    def get_batch():
        ix = torch.randint(len(data) - args.block_size - 1, (8,))
        return (torch.stack([data[i:i + args.block_size] for i in ix]), data[ix + args.block_size])

    for it in range(args.max_iters):
        for micro_step in range(args.grad_accum):
            x, y = get_batch()
            loss = nn.functional.cross_entropy(model(x), y) / args.grad_accum
            loss.backward()
        optimizer.step()  # FAULT
        optimizer.zero_grad(set_to_none=True)
        if rank == 0 and it % 4 == 0:
            print(f"iter {it}: loss {loss.item() * args.grad_accum:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
