"""What one Python-level collective costs the calling thread: thread CPU time per ``dist.all_reduce`` of one
float, over many calls, printed by rank 0 as one JSON line. Run it bare and under a command, in the same
session, and compare (the difference is the wrapper's cost per call, its ledger line included):

    torchrun --standalone --nproc-per-node 2 benchmarks/collective_cost.py
    ddpdoctor hang --nproc-per-node 2 benchmarks/collective_cost.py

Thread CPU time, not wall time: a collective's wall time is mostly waiting for the peer, which a loaded host
stretches; the calling thread's CPU is what the wrapper adds to. With 2 ranks on 2 cores each rank's own work
is slower than with 1 (the other rank and gloo's threads share the caches), so compare like with like.
"""

import argparse
import json
import time

import torch
import torch.distributed as dist


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--warmup", type=int, default=200)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    x = torch.zeros(1)
    for _ in range(args.warmup):
        dist.all_reduce(x)
    dist.barrier()
    t0 = time.thread_time_ns()
    w0 = time.perf_counter()
    for _ in range(args.calls):
        dist.all_reduce(x)
    cpu_us = (time.thread_time_ns() - t0) / args.calls / 1e3
    wall_us = (time.perf_counter() - w0) / args.calls * 1e6
    if dist.get_rank() == 0:
        print(
            json.dumps(
                {"calls": args.calls, "thread_cpu_us_per_call": round(cpu_us, 2), "wall_us_per_call": round(wall_us, 2)}
            )
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
