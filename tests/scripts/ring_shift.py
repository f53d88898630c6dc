"""A long metric loop, then a collective only rank 0 makes (test_scale.py: the ledger ring).

Thousands of collectives fill a small ledger ring (DDPDOCTOR_LEDGER_RING) several times over; the extra
all_reduce near the end lies inside the ring, so the divergence must still be found at its line.
"""

import time

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    metric = torch.zeros(1)
    for step in range(2500):
        metric.fill_(step)
        dist.all_reduce(metric)  # REGULAR
        if step % 8 == 0:
            time.sleep(0.002)  # a little time between calls, as a training step has
        if rank == 0 and step == 2450:
            dist.all_reduce(metric)  # EXTRA: only rank 0 makes this call
    dist.barrier()  # END
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
