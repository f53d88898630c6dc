"""torch's own flight-recorder analyzer test cases (test/distributed/flight_recorder/test_fr_analysis.py,
``FlightRecorderE2ETest``), rebuilt as real gloo jobs: 2 ranks under plain torchrun, never under ddpdoctor,
the flight recorder on, dumped by frjob.py's watchdog (on a stall) or at the end (a job that completes).

torch's cases are hand-written entries; here each is the collective calls that produce such entries on gloo.
gloo records a coalesced all-reduce as one ``all_reduce`` entry with several sizes, runs the calls made under
``_coalescing_manager`` one by one, and does a reduce-scatter as one all-reduce per chunk.

Cases (argv[1]):
  matched     (torch's case 1) an all_reduce on the default group, then one on a group of the rank's own
              (``new_group([0])`` on rank 0, ``new_group([1])`` on rank 1): every call matched, OK
  coalesced   (case 2) ``all_reduce_coalesced`` of two tensors on both ranks: matched, OK
  broadcasts  (case 3) two broadcasts under ``_coalescing_manager``: matched, OK
  uneven-rs   (case 5) a reduce-scatter whose chunks differ in size (4x4 to rank 0, 2x4 to rank 1): its
              entries differ from rank to rank's output but match across ranks, OK
  extra-coalesced  (case 6, made real) rank 1 alone makes a coalesced all-reduce of two 2x4 tensors
              (EXTRA_COALESCED). It meets rank 0's next all_reduce of one 4x4 (NEXT): the same bytes, so gloo
              completes it, with other shapes; rank 1's own NEXT then waits for good: rank 1 made the extra call
"""

import datetime
import sys
import threading
import time

import torch
import torch.distributed as dist
from frjob import dump, settled, watchdog
from torch.distributed.distributed_c10d import _coalescing_manager


def run(case: str, rank: int, progress: list) -> None:
    x = torch.ones(4, 4)
    progress[0] = time.monotonic()
    dist.all_reduce(x)  # FIRST
    if case == "matched":
        own = [dist.new_group([0]), dist.new_group([1])][rank]
        dist.all_reduce(torch.ones(5, 5), group=own)  # OWN_GROUP
    elif case == "coalesced":
        dist.all_reduce_coalesced([torch.ones(4, 4), torch.ones(4, 4)])  # COALESCED
    elif case == "broadcasts":
        with _coalescing_manager():
            dist.broadcast(torch.ones(4, 4), 0)  # BROADCAST_1
            dist.broadcast(torch.ones(4, 4), 0)  # BROADCAST_2
    elif case == "uneven-rs":
        out = torch.zeros(4, 4) if rank == 0 else torch.zeros(2, 4)
        dist.reduce_scatter(out, [torch.ones(4, 4), torch.ones(2, 4)])  # UNEVEN_RS
    elif case == "extra-coalesced" and rank == 1:
        dist.all_reduce_coalesced([torch.ones(2, 4), torch.ones(2, 4)])  # EXTRA_COALESCED
    progress[0] = time.monotonic()
    dist.all_reduce(x)  # NEXT
    progress[0] = None


def main() -> None:
    case = sys.argv[1]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    progress: list = [None]
    threading.Thread(target=watchdog, args=(rank, progress), daemon=True).start()
    run(case, rank, progress)
    settled()
    dump(rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
