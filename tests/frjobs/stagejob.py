"""A pipeline of three stages on gloo: every step rank 0 sends its activations to rank 1, rank 1 receives them
and sends its own on to rank 2, then all three all-reduce (the loss, say) and meet at a barrier. Run under
``ddpdoctor hang`` (tests/e2e/test_pipeline_stages.py) or under plain torchrun with frjob.py's watchdog, which
dumps every rank's flight recorder (run_job(case, out, job=STAGE_JOB, nproc=3)). gloo records no p2p op in the
flight recorder; it counts each send and recv in the op ids of the ranks that take part.

Cases (argv[1]):
  healthy  every call completes; dumped at the end
  extra    the middle stage (rank 1) all-reduces once more at step 3 under a rank test (EXTRA): it meets the
           other stages' all-reduce, and rank 1 then waits in its own while the others went on
  skip     the middle stage does not send to rank 2 at step 3 (SKIP: its send is under a rank-and-step test):
           rank 2 waits in its receive (RECV2) and ranks 0 and 1 in the step's all-reduce, which rank 2 never
           reaches
"""

import signal
import time

import frjob
import torch
import torch.distributed as dist


def train(case: str, rank: int, progress: list) -> None:
    x = torch.ones(4)
    for step in range(6):
        progress[0] = time.monotonic()  # each call below is watched from its entry
        if rank == 0:
            dist.send(x, 1)  # SEND0
        elif rank == 1:
            dist.recv(x, 0)  # RECV1
            if not (case == "skip" and step == 3):  # SKIP
                dist.send(x, 2)  # SEND1
        else:
            dist.recv(x, 1)  # RECV2
        if case == "extra" and rank == 1 and step == 3:  # GUARD
            dist.all_reduce(torch.zeros(4))  # EXTRA
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
