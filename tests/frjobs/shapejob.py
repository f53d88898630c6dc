"""A gloo job that hangs and stays hung, run under plain torchrun (never under ddpdoctor) for ``attach``, and
under ``ddpdoctor hang``: the common hang shapes beside attachjob.py's extra call, one per ``argv[1]``. No watchdog
ends it; the test ends the job's process tree.

- ``busy``: rank 1 stalls in its data-reading helper at step 2 (BUSY: a read that never returns) with nothing
  pending, while rank 0 waits in its next REGULAR all_reduce.
- ``uneven``: rank 1 has 2 batches, rank 0 has 6; rank 1 leaves its loop and waits in the final barrier (END)
  while rank 0 waits in its third REGULAR all_reduce.

``shiftjob.py`` is the shape whose dumps look like ``uneven``'s with the sides swapped (a file of its own: a
rank-guarded call in this loop, even one that never runs, is what the stacks' judge reads an extra call from).

``ATTACHJOB_DEBUG_PORT``: every rank starts torch's debug server first, as in attachjob.py (the flight recorder
is whatever ``TORCH_FR_BUFFER_SIZE`` says).
"""

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist


def read_batch(step: int, rank: int, fault: str) -> torch.Tensor:
    """The step's batch; in the busy fault, rank 1's read at step 2 never returns."""
    if fault == "busy" and rank == 1 and step == 2:
        while True:
            time.sleep(0.05)  # BUSY: rank 1's read never returns
    return torch.ones(8)


def main() -> None:
    fault = sys.argv[1]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    port = os.environ.get("ATTACHJOB_DEBUG_PORT")
    if port:
        from torch.distributed.debug import start_debug_server

        # fork: the frontend is a child of rank 0 the test ends with the job's process tree
        start_debug_server(port=int(port), start_method="fork")
    batches = 2 if fault == "uneven" and rank == 1 else 6
    print(f"shapejob: rank {rank} ready", file=sys.stderr, flush=True)
    for step in range(batches):
        x = read_batch(step, rank, fault)
        dist.all_reduce(x)  # REGULAR
    dist.barrier()  # END
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
