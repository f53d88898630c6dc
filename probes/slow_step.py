"""Healthy-but-slow probe: one step takes longer than --timeout on every rank with no collective in
flight (a long data preparation that computes). Nobody waits for anybody and every rank burns CPU: not a
hang. (A step that neither computes nor communicates on any rank for longer than --timeout is one: see
hang.timeout.)

Expected findings: none (run it with --timeout shorter than --sleep).
Self-test: --timeout 2 -- --sleep 4
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sleep", type=float, default=4.0)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(8, 1))
    for step in range(3):
        if step == 1:
            end = time.time() + args.sleep
            while time.time() < end:  # a long step, no collective in flight
                torch.randn(128, 128) @ torch.randn(128, 128)
        model(torch.randn(4, 8)).sum().backward()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
