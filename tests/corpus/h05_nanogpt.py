"""Healthy. nanoGPT's train.py style: no DataLoader, random windows cut from one token tensor (as from a
memmap), per-rank seed offset set before the model is built (DDP's broadcast makes the weights equal),
gradient accumulation that only all-reduces on the last micro-step via model.require_backward_grad_sync,
cosine LR with warmup, gradient clipping, estimate_loss on every rank, master-only logging/checkpoint.

    torchrun --nproc-per-node 2 h05_nanogpt.py --max_iters 24
"""

import argparse
import math
import os
import time
from contextlib import nullcontext

import torch
import torch.nn as nn
from torch.distributed import destroy_process_group, init_process_group
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd)
        self.attn = nn.MultiheadAttention(n_embd, n_head, batch_first=True)
        self.ln2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))
        self.block_size = block_size

    def forward(self, x):
        t = x.size(1)
        h = self.ln1(x)
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), 1)
        x = x + self.attn(h, h, h, attn_mask=causal, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_embd=32, n_head=2, n_layer=2):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, block_size) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying

    def forward(self, idx, targets=None):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--max_iters", type=int, default=24)
    p.add_argument("--eval_interval", type=int, default=10)
    p.add_argument("--eval_iters", type=int, default=4)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--block_size", type=int, default=16)
    p.add_argument("--gradient_accumulation_steps", type=int, default=4)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--out_dir", default="out_h05")
    cfg = p.parse_args()

    ddp = int(os.environ.get("RANK", -1)) != -1
    if ddp:
        init_process_group(backend="gloo")
        ddp_rank = int(os.environ["RANK"])
        ddp_world_size = int(os.environ["WORLD_SIZE"])
        master_process = ddp_rank == 0
        seed_offset = ddp_rank
        assert cfg.gradient_accumulation_steps % ddp_world_size == 0
        cfg.gradient_accumulation_steps //= ddp_world_size
    else:
        master_process, seed_offset, ddp_world_size = True, 0, 1
    tokens_per_iter = cfg.gradient_accumulation_steps * ddp_world_size * cfg.batch_size * cfg.block_size
    if master_process:
        print(f"tokens per iteration will be: {tokens_per_iter:,}")
        os.makedirs(cfg.out_dir, exist_ok=True)
    torch.manual_seed(1337 + seed_offset)
    ctx = nullcontext()

    vocab_size = 64
    corpus = torch.Generator().manual_seed(42)
    train_data = torch.randint(vocab_size, (20_000,), generator=corpus, dtype=torch.int16)
    val_data = torch.randint(vocab_size, (4_000,), generator=corpus, dtype=torch.int16)

    def get_batch(split):
        data = train_data if split == "train" else val_data
        ix = torch.randint(len(data) - cfg.block_size, (cfg.batch_size,))
        x = torch.stack([data[i:i + cfg.block_size].long() for i in ix])
        y = torch.stack([data[i + 1:i + 1 + cfg.block_size].long() for i in ix])
        return x, y

    model = TinyGPT(vocab_size, cfg.block_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, betas=(0.9, 0.95), weight_decay=0.1)
    if ddp:
        model = DDP(model)
    raw_model = model.module if ddp else model

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ["train", "val"]:
            losses = torch.zeros(cfg.eval_iters)
            for k in range(cfg.eval_iters):
                X, Y = get_batch(split)
                with ctx:
                    _, loss = model(X, Y)
                losses[k] = loss.item()
            out[split] = losses.mean()
        model.train()
        return out

    def get_lr(it, warmup_iters=4, lr_decay_iters=None, min_lr=1e-4):
        lr_decay_iters = lr_decay_iters or cfg.max_iters
        if it < warmup_iters:
            return cfg.learning_rate * (it + 1) / (warmup_iters + 1)
        ratio = (it - warmup_iters) / max(1, lr_decay_iters - warmup_iters)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * min(ratio, 1.0))) * (cfg.learning_rate - min_lr)

    X, Y = get_batch("train")
    t0 = time.time()
    best_val_loss = 1e9
    for iter_num in range(cfg.max_iters + 1):
        lr = get_lr(iter_num)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        if iter_num % cfg.eval_interval == 0 and master_process:
            losses = estimate_loss()
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            if losses["val"] < best_val_loss and iter_num > 0:
                best_val_loss = losses["val"]
                torch.save({"model": raw_model.state_dict(), "optimizer": optimizer.state_dict(),
                            "iter_num": iter_num, "best_val_loss": best_val_loss},
                           os.path.join(cfg.out_dir, "ckpt.pt"))
        for micro_step in range(cfg.gradient_accumulation_steps):
            if ddp:
                model.require_backward_grad_sync = (micro_step == cfg.gradient_accumulation_steps - 1)
            with ctx:
                _, loss = model(X, Y)
                loss = loss / cfg.gradient_accumulation_steps
            X, Y = get_batch("train")
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if master_process and iter_num % 5 == 0:
            dt, t0 = time.time() - t0, time.time()
            print(f"iter {iter_num}: loss {loss.item() * cfg.gradient_accumulation_steps:.4f}, time {dt * 1000:.0f}ms")
    if ddp:
        destroy_process_group()


if __name__ == "__main__":
    main()
