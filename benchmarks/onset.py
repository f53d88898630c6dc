"""Deadlock onset probes for latency measurement: prints ONSET <unix time> right before each rank
enters the collective that will never complete.

--mode certain: rank 0 enters a barrier, rank 1 an all_reduce (provable at once).
--mode uncertain: rank 1 enters a barrier while rank 0 keeps computing (a hang only after --timeout).
"""

import argparse
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["certain", "uncertain"], default="certain")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for _ in range(5):
        dist.all_reduce(torch.ones(4))
    if args.mode == "certain":
        print(f"ONSET {time.time():.3f}", flush=True)
        if rank == 0:
            dist.barrier()
        else:
            dist.all_reduce(torch.ones(4))
    else:
        if rank == 0:
            time.sleep(3600)
        print(f"ONSET {time.time():.3f}", flush=True)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
