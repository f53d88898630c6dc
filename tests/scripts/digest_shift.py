"""A metric loop of 120 all_reduces, then a barrier (test_scale.py: the running digest).

With ``--extra`` rank 0 makes one more all_reduce at step 5, long before the last collectives a small
ledger ring (DDPDOCTOR_LEDGER_RING=16) keeps: inside the ring every call looks alike, the ranks' digests
at the ring's start differ. ``--pace S`` sleeps S seconds a step: a job slow enough for the rank's reads of
torch's recorder to see every chunk of its calls.
"""

import sys
import time

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    metric = torch.zeros(4)
    pace = float(sys.argv[sys.argv.index("--pace") + 1]) if "--pace" in sys.argv else 0.0
    for step in range(120):
        time.sleep(pace)
        metric.fill_(step)
        dist.all_reduce(metric)  # REGULAR
        if "--extra" in sys.argv and rank == 0 and step == 5:
            dist.all_reduce(metric)  # EXTRA: only rank 0 makes this call
    dist.barrier()  # END
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
