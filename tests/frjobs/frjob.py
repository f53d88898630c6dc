"""A gloo job with torch's flight recorder on, run under plain torchrun, never under ddpdoctor.

Its own watchdog thread does what NCCL's watchdog does: when the main thread has been inside one collective
for FRJOB_STALL seconds (then it also asks the other ranks to dump, through $FRJOB_DUMP_REQUEST), when
another rank asks, or when a collective fails, it writes ``_dump_fr_trace()`` (pickle) to
``$TORCH_FR_DUMP_TEMP_FILE<rank>`` and ``_dump_fr_trace_json()`` to ``$FRJOB_JSON_PREFIX<rank>``, then ends
the rank. torch 2.13 records gloo collectives in the flight recorder natively (TORCH_FR_BUFFER_SIZE).

Cases (argv[1]):
  extra    rank 1 all-reduces once more, on a second process group, inside ``if rank == 1`` (EXTRA)
  kill     rank 1 dies (SIGKILL of itself) at step 3: no dump, no error file (DIE)
  raise    rank 1 raises at step 3 under torchrun's @record: an error file, no dump (RAISE)
  healthy  every collective completes; the dump is written once at the end
  busy     rank 1 stalls at step 3 in its data-reading helper, before its all-reduce (BUSY): nothing pending
  p2p      as busy, after a send/recv pair at step 1 (gloo records no p2p entry, but counts its op id)
  helper   both ranks all-reduce on the side group through a helper at step 0; rank 1 alone does it again
           at step 2 (EXTRA_HELPER): the innermost user line (HELPER) is both ranks'
  size     rank 1 all-reduces 4 elements at step 2 where rank 0 reduces 8 (SIZE)
  size0    rank 0 all-reduces 4 elements at step 2 where rank 1 reduces 8 (SIZE0): gloo aborts rank 0, and rank
           1's dump holds the call it was in
  dtype    rank 1 all-reduces int32 at step 2 where rank 0 reduces float32 (DTYPE): same bytes, completes
  teardown as extra, but only rank 1's watchdog dumps, and it ends its rank at once: the dump-and-exit race. Rank
           0 fails when rank 1's sockets close and then waits out the timeout its own watchdog would dump at (as
           NCCL's does); torchrun's SIGTERM for rank 1's exit ends it first (no handler): no dump of rank 0
"""

import datetime
import json
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace, _dump_fr_trace_json
from torch.distributed.elastic.multiprocessing.errors import record

STALL = float(os.environ.get("FRJOB_STALL", "1.0"))
TEARDOWN = sys.argv[1:2] == ["teardown"]
_dumped = threading.Event()
_lock = threading.Lock()


def dump(rank: int) -> None:
    """Write both dumps once (atomically: a rank killed mid-write leaves no half file)."""
    with _lock:
        if _dumped.is_set():
            return
        for prefix, data in (
            (os.environ["TORCH_FR_DUMP_TEMP_FILE"], _dump_fr_trace()),
            (os.environ["FRJOB_JSON_PREFIX"], _dump_fr_trace_json()),
        ):
            path = f"{prefix}{rank}"
            with open(path + ".tmp", "wb") as f:
                f.write(data)
            os.replace(path + ".tmp", path)
        _dumped.set()
        print(f"frjob: rank {rank} dumped", file=sys.stderr, flush=True)


def watchdog(rank: int, progress: list) -> None:
    """NCCL's watchdog, in small: a collective this rank is inside for longer than STALL (``progress[0]``:
    when it entered the call, None between calls) makes it dump, and ask the others to dump too, as
    TORCH_NCCL_DUMP_ON_TIMEOUT does through the store; a rank that is busy outside any collective dumps
    when asked. Timed from the entry into the call, not from the last one's return: on a loaded host a rank
    can be off the CPU for a second between two calls, and a dump taken then misses the call it makes next."""
    request = os.environ.get("FRJOB_DUMP_REQUEST", "")
    while not _dumped.is_set():
        time.sleep(0.1)
        entered = progress[0]
        stalled = entered is not None and time.monotonic() - entered > STALL
        if stalled or (request and os.path.exists(request)):
            if stalled and request:
                with open(request, "w") as f:
                    f.write(str(rank))
            dump(rank)
            if not TEARDOWN:
                others_dumped()  # NCCL's watchdog, too, gives the other ranks' dumps time before it aborts
            os._exit(6)


def others_dumped(bound: float = 10.0) -> None:
    """Wait (bounded) until every rank's dumps are written. A rank that ended at once would close its sockets
    while a peer is still taking its dumps: gloo then fails the peer's pending collective and marks it retired,
    and a loaded host put that between the peer's pickle and its JSON dump (the JSON read the extra call
    completed, the pickle pending)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    prefixes = (os.environ["TORCH_FR_DUMP_TEMP_FILE"], os.environ["FRJOB_JSON_PREFIX"])
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if all(os.path.exists(f"{p}{r}") for p in prefixes for r in range(world)):
            return
        time.sleep(0.05)


def _on_error(rank: int, exc: BaseException) -> None:
    """A collective that failed (the innermost frame is torch.distributed's): dump, as NCCL does on an
    async error. The user's own exception (RAISE) leaves no dump."""
    frames = traceback.extract_tb(exc.__traceback__)
    if frames and "torch/distributed/" in frames[-1].filename:
        if TEARDOWN:
            time.sleep(60)  # its watchdog's timeout, before it would dump: torchrun's SIGTERM comes first
        dump(rank)


def main() -> None:
    case = sys.argv[1]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    side = dist.new_group([0, 1])
    progress: list = [None]
    if case == "teardown" and rank == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # torchrun's SIGTERM ends it before any dump
    else:
        threading.Thread(target=watchdog, args=(rank, progress), daemon=True).start()
    try:
        train(case, rank, side, progress)
    except Exception as e:
        _on_error(rank, e)
        raise
    if case in ("healthy", "dtype"):
        settled()
        dump(rank)
    dist.destroy_process_group()


def settled(bound: float = 30.0) -> None:
    """Wait (bounded) until the recorder has retired every collective this rank issued. gloo retires an entry
    from its own thread, after ``wait()`` has already returned to Python: on a loaded host a dump taken at once
    can still show the last barrier pending on every rank, which reads as a transport stall."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        status = json.loads(_dump_fr_trace_json()).get("pg_status", {})
        if all(int(s["last_completed_collective"]) >= int(s["last_enqueued_collective"]) for s in status.values()):
            return
        time.sleep(0.05)


def read_batch(step: int) -> None:
    """The data-reading helper rank 1 stalls in (busy, p2p): a loop that never returns."""
    while True:
        time.sleep(0.05)  # BUSY


def sync(x: torch.Tensor, group: object = None) -> None:
    dist.all_reduce(x, group=group)  # HELPER


def train(case: str, rank: int, side: object, progress: list) -> None:
    x = torch.ones(8)
    for step in range(6):
        if case in ("busy", "p2p") and rank == 1 and step == 3:
            read_batch(step)
        progress[0] = time.monotonic()  # each call below is watched from its entry
        if case == "p2p" and step == 1:
            if rank == 0:
                dist.send(x, 1)
            else:
                dist.recv(x, 0)
        if case == "helper" and step == 0:
            sync(x, side)  # REGULAR_HELPER
        if case == "size" and rank == 1 and step == 2:
            dist.all_reduce(torch.ones(4))  # SIZE
        elif case == "size0" and rank == 0 and step == 2:
            dist.all_reduce(torch.ones(4))  # SIZE0
        elif case == "dtype" and rank == 1 and step == 2:
            dist.all_reduce(torch.ones(8, dtype=torch.int32))  # DTYPE
        else:
            dist.all_reduce(x)  # REGULAR
        progress[0] = None
        if case in ("extra", "teardown") and rank == 1 and step == 2:
            progress[0] = time.monotonic()
            dist.all_reduce(x, group=side)  # EXTRA: only rank 1 makes this call
        if case == "helper" and rank == 1 and step == 2:
            progress[0] = time.monotonic()
            sync(x, side)  # EXTRA_HELPER
        progress[0] = None
        if case == "kill" and rank == 1 and step == 3:
            os.kill(os.getpid(), signal.SIGKILL)  # DIE
        if case == "raise" and rank == 1 and step == 3:
            raise RuntimeError("loss is nan at step 3")  # RAISE
    if case not in ("healthy", "dtype"):
        # the job's 1 s watchdog stands in for NCCL's minutes: on a loaded host the last barrier of a healthy
        # run can take longer than that, and a dump from inside it would look like a stall
        progress[0] = time.monotonic()
    dist.barrier()  # END


def _on_sigterm(signum: int, frame: object) -> None:
    """torchrun's agent ends the other ranks with SIGTERM as soon as one rank dies, often before the
    survivor's failed collective returned; on another node of a multi-node job its watchdog would have
    dumped first. Python runs this handler once the blocked collective returns: dump (unless the main
    thread is dumping right now), then end as SIGTERM would have. Placed last: the markers' lines stay."""
    if _lock.acquire(blocking=False):
        _lock.release()
        dump(int(os.environ.get("RANK", "0")))
        os._exit(128 + signal.SIGTERM)


def job_main(train: Callable[[str, int, list], None]) -> None:
    """The main of a job that uses this one's watchdog (tests/frjobs/pipejob.py): gloo with a 60 s timeout,
    the watchdog, ``train(case, rank, progress)``, and on a healthy run one dump once every collective
    retired. Placed after the markers: their lines stay."""
    case = sys.argv[1]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    progress: list = [None]
    threading.Thread(target=watchdog, args=(rank, progress), daemon=True).start()
    train(case, rank, progress)
    if case == "healthy":
        settled()
        dump(rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _on_sigterm)
    # FRJOB_NO_RECORD: a script without torchrun's @record: no error file, the traceback only in the logs
    (main if os.environ.get("FRJOB_NO_RECORD") else record(main))()
