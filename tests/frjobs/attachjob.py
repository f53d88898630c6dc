"""A gloo job that hangs and stays hung, run under plain torchrun (never under ddpdoctor), for ``attach``.

Rank 1 all-reduces once more, on a second process group, inside ``if rank == 1`` (EXTRA); rank 0 goes on to its
next regular all_reduce (REGULAR) and both block there for as long as the test lets them (no watchdog ends them).
With ``ATTACHJOB_DEBUG_PORT`` set, every rank starts torch's debug server first
(``torch.distributed.debug.start_debug_server``: a worker server per rank, registered in the job's TCPStore as
``debug_server/rank<N>``; rank 0 also starts the HTTP frontend on that port). The flight recorder is whatever the
environment says (``TORCH_FR_BUFFER_SIZE``; torch 2.13's default ring is 2000 entries). Under
``torch.distributed.elastic.control_plane.worker_main()`` with ``TORCH_WORKER_SERVER_SOCKET`` set (one path per
rank, in the rank's environment from its start), the same worker server listens on that Unix socket instead.
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
    side = dist.new_group([0, 1])
    x = torch.ones(8)
    print(f"attachjob: rank {rank} ready", file=sys.stderr, flush=True)
    for step in range(6):
        dist.all_reduce(x)  # REGULAR
        if rank == 1 and step == 2:
            dist.all_reduce(x, group=side)  # EXTRA: only rank 1 makes this call
    dist.barrier()  # END
    dist.destroy_process_group()


if __name__ == "__main__":
    if os.environ.get("TORCH_WORKER_SERVER_SOCKET"):
        from torch.distributed.elastic.control_plane import worker_main

        with worker_main():
            main()
    else:
        main()
