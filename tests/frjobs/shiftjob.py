"""A gloo job that hangs and stays hung (run under plain torchrun for ``attach``, and under ``ddpdoctor hang``):
rank 0 makes an EXTRA all_reduce at step 2, on the same group with the same shape. It meets rank 1's next
regular one and shifts every call after it: rank 1 ends its loop first and waits in the final barrier (END) while
rank 0 waits in its last REGULAR all_reduce. Its dumps look like shapejob.py's ``uneven`` with the sides swapped:
only lines or history tell the two apart. No watchdog ends it; the test ends the job's process tree.

``ATTACHJOB_DEBUG_PORT``: every rank starts torch's debug server first, as in attachjob.py.
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    port = os.environ.get("ATTACHJOB_DEBUG_PORT")
    if port:
        from torch.distributed.debug import start_debug_server

        # fork: the frontend is a child of rank 0 the test ends with the job's process tree
        start_debug_server(port=int(port), start_method="fork")
    print(f"shiftjob: rank {rank} ready", file=sys.stderr, flush=True)
    for step in range(6):
        x = torch.ones(8)
        dist.all_reduce(x)  # REGULAR
        if rank == 0 and step == 2:
            dist.all_reduce(x)  # EXTRA: only rank 0 makes this call
    dist.barrier()  # END
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
