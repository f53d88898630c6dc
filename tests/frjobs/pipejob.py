"""A gloo job of three ranks with torch's flight recorder on, run under plain torchrun (tests/frjobs/jobs.py
run_job(case, out, job=PIPE_JOB, nproc=3)): two pipeline stages, rank 0 sending its activations to rank 1 every
step, and rank 2 that takes no part in the p2p; then all three all-reduce and meet at a barrier. gloo counts
each send and recv in the op ids of ranks 0 and 1 only. frjob.py's watchdog dumps every rank.

Cases (argv[1]): ``healthy`` every call completes, dumped at the end; ``extra`` rank 2 alone all-reduces two
elements at step 3 under a rank test (EXTRA): it finishes on rank 2's side against the stages' all-reduce of
four, and rank 2 then waits in its next one; ``busy`` rank 1 stalls in its data reader at step 3 (frjob.py
BUSY): ranks 0 and 2 wait in the step's all-reduce.
"""

import signal
import time

import frjob
import torch
import torch.distributed as dist


def train(case: str, rank: int, progress: list) -> None:
    x = torch.ones(4)
    for step in range(6):
        if rank == 0:
            dist.send(x, 1)  # SEND
        elif rank == 1:
            dist.recv(x, 0)  # RECV
        if case == "extra" and rank == 2 and step == 3:  # GUARD
            progress[0] = time.monotonic()
            dist.all_reduce(torch.zeros(2))  # EXTRA
        if case == "busy" and rank == 1 and step == 3:
            frjob.read_batch(step)
        progress[0] = time.monotonic()
        dist.all_reduce(x)  # STEP
        x /= 3
        dist.barrier()  # BAR
        progress[0] = None
    if case != "healthy":
        progress[0] = time.monotonic()
    dist.barrier()  # END


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, frjob._on_sigterm)
    frjob.job_main(train)
