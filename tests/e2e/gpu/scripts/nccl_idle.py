"""One NCCL rank that makes a few all_reduces and then stays alive (sleeping, not in a collective) for
``ddpdoctor attach`` to take its flight recorder; started with plain torchrun, never under ddpdoctor.

With ``ATTACHJOB_DEBUG_PORT`` set it starts torch's debug server first (rank 0's frontend on that port).
It writes ``$NCCL_IDLE_READY`` once its collectives completed and ends by itself after 300 s at the latest.
"""

import os
import time

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    port = os.environ.get("ATTACHJOB_DEBUG_PORT")
    if port:
        from torch.distributed.debug import start_debug_server

        start_debug_server(port=int(port), start_method="fork")
    x = torch.ones(16, device=dev)
    for _ in range(5):
        dist.all_reduce(x)  # ALLREDUCE
    torch.cuda.synchronize()
    with open(os.environ["NCCL_IDLE_READY"], "w") as f:
        f.write("ready")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        time.sleep(0.2)  # IDLE
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
