"""A gloo job shaped like mixture-of-experts routing, with torch's flight recorder on, run under plain
torchrun (tests/frjobs/jobs.py run_job(case, out, job=MOE_JOB)). Each step every rank routes its tokens to both
ranks with its own split sizes (``all_to_all_single`` with uneven splits: rank 0 sends 2 and 4 rows, rank 1
sends 5 and 3, so their inputs differ by design), then all-reduces its loss. At step 3 rank 1 stalls in its
data reader before routing (BUSY): rank 0 waits in the all-to-all. frjob.py's watchdog dumps every rank.

Cases (argv[1]): ``busy`` as above; ``healthy`` every step completes, dumped at the end.
"""

import datetime
import signal
import sys
import threading
import time

import frjob
import torch
import torch.distributed as dist


def train(case: str, rank: int, progress: list) -> None:
    send = [2, 4] if rank == 0 else [5, 3]  # rows this rank routes to rank 0 and rank 1
    recv = [2, 5] if rank == 0 else [4, 3]  # rows it gets from rank 0 and rank 1
    for step in range(6):
        if case == "busy" and rank == 1 and step == 3:
            frjob.read_batch(step)
        progress[0] = time.monotonic()
        tokens = torch.ones(sum(send), 4)
        routed = torch.empty(sum(recv), 4)
        dist.all_to_all_single(routed, tokens, recv, send)  # ROUTE
        loss = torch.ones(1)
        dist.all_reduce(loss)  # REGULAR
        progress[0] = None
    if case != "healthy":
        progress[0] = time.monotonic()
    dist.barrier()  # END


def main() -> None:
    case = sys.argv[1]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    progress: list = [None]
    threading.Thread(target=frjob.watchdog, args=(rank, progress), daemon=True).start()
    train(case, rank, progress)
    if case == "healthy":
        frjob.settled()
        frjob.dump(rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, frjob._on_sigterm)
    main()
