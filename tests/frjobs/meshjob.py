"""A 2-D device mesh of four gloo ranks (``init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))``):
each step all-reduces partial sums on the rank's tp group, then its gradients on its dp group. Runs under
plain torchrun with torch's flight recorder on (tests/frjobs/jobs.py run_job(case, out, job=MESH_JOB,
nproc=4): frjob.py's watchdog dumps every rank), and under ddpdoctor as any script does.

Mesh (rank = 2 * dp + tp): the tp groups are {0, 1} and {2, 3}, the dp groups {0, 2} and {1, 3}.

Cases (argv[1]):
  healthy  every call completes
  tp-extra global rank 3 all-reduces once more on its tp group at step 2 (EXTRA): rank 2 has gone on to its
           dp all-reduce with rank 0, rank 0 waits there for rank 2's... the ranks stranded on dp are victims
  dp-skip  rank 1 skips its dp all-reduce at step 2 (SKIP): rank 3 waits in it; rank 1 goes on to the next
           step's tp all-reduce
"""

import signal
import time

import frjob
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh


def train(case: str, rank: int, progress: list) -> None:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    tp = mesh.get_group("tp")
    dp = mesh.get_group("dp")
    x = torch.ones(8)
    for step in range(6):
        progress[0] = time.monotonic()  # each call below is watched from its entry
        dist.all_reduce(x, group=tp)  # PARTIAL
        if case == "tp-extra" and rank == 3 and step == 2:
            dist.all_reduce(x, group=tp)  # EXTRA: only rank 3 makes this call
        if not (case == "dp-skip" and rank == 1 and step == 2):
            dist.all_reduce(x, group=dp)  # GRADS (SKIP: rank 1 skips it at step 2)
        x /= 4
        progress[0] = None
    if case != "healthy":
        progress[0] = time.monotonic()
    dist.barrier()  # END


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, frjob._on_sigterm)
    frjob.job_main(train)
