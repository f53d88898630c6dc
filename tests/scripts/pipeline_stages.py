"""Three ranks, two of them pipeline stages: rank 0 sends its activations to rank 1 every step, rank 2 takes no
part, then all three all-reduce and meet at a barrier. gloo counts each send and recv in the group's sequence
on ranks 0 and 1 only, so their positions run ahead of rank 2's. Faults: ``extra`` (rank 2 alone all-reduces
at step 3), ``busy`` (rank 1 stalls at step 3)."""

import sys
import time

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    fault = sys.argv[1] if len(sys.argv) > 1 else "healthy"
    x = torch.ones(4)
    for step in range(6):
        if rank == 0:
            dist.send(x, 1)
        elif rank == 1:
            dist.recv(x, 0)
        if fault == "extra" and rank == 2 and step == 3:  # GUARD
            dist.all_reduce(torch.zeros(2))  # EXTRA
        if fault == "busy" and rank == 1 and step == 3:
            time.sleep(120)  # BUSY
        dist.all_reduce(x)  # STEP
        x /= 3
        dist.barrier()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
