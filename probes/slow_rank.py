"""Fault probe: rank 0 runs a long evaluation on its own while rank 1 already waits in a barrier.
Not provably a deadlock (rank 0 may still arrive): an uncertain wait, a hang only after --timeout.

Run with a short --timeout (the tests use 3 s); rank 0 would need --sleep seconds.
Expected finding: hang.timeout, rank 1 waiting at BARRIER, rank 0 busy at EVAL.
Self-test: --timeout 3
"""

import argparse
import time

import torch.distributed as dist


def evaluate(seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        time.sleep(0.05)  # EVAL


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sleep", type=float, default=120.0)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        evaluate(args.sleep)
    dist.barrier()  # BARRIER
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
