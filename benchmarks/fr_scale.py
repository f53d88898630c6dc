"""Time the flight-recorder post-mortem (``ddpdoctor analyze DUMPS``) on synthetic dumps of growing size.

Each job: RANKS gloo-style pickle dumps of ENTRIES collectives on the default group, each with a two-frame
stack; every rank but the last waits in the final collective, the last rank is one behind (nothing
pending: the common hang). For each size it times reading the dumps (``inputs.load``) and judging them
(``report.build``), wall clock and CPU time, checks the culprit is the last rank, and prints one JSON line.
A large job's dumps are read by a pool of worker processes (``inputs.read_dumps``): ``load_cpu_s`` is this
process's CPU time, ``load_workers_cpu_s`` the workers'; ``--no-pool`` reads them all in this process.
Issue 34's goal: 1,024 ranks x 2,000 entries judged in under 10 s (the judge was O(ranks^2 x entries)).

    python benchmarks/fr_scale.py --ranks 64 256 1024 --entries 2000
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ddpdoctor.analysis.config import Config  # noqa: E402
from ddpdoctor.postmortem import inputs, report  # noqa: E402


def _entry(i: int, seq: int) -> dict:
    return {
        "record_id": i,
        "pg_id": 0,
        "process_group": ("0", "default_pg"),
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": "gloo:all_reduce",
        "is_p2p": False,
        "input_sizes": [[1024]],
        "output_sizes": [[1024]],
        "input_dtypes": ["Float"],
        "output_dtypes": ["Float"],
        "state": "scheduled",
        "retired": True,
        "time_created_ns": 1_000_000_000 + seq * 1_000_000,
        "timeout_ms": 600000,
        "frames": [
            {"name": "all_reduce", "filename": "/x/site-packages/torch/distributed/distributed_c10d.py", "line": 3245},
            {"name": "train", "filename": "/job/train.py", "line": 42},
        ],
    }


def write_job(folder: str, ranks: int, entries: int) -> None:
    """RANKS dumps; the last rank issued one collective fewer than the others."""
    world = str(list(range(ranks)))
    for r in range(ranks):
        n = entries - 1 if r == ranks - 1 else entries
        ents = [_entry(i, i + 1) for i in range(n)]
        done = n if r == ranks - 1 else n - 1
        dump = {
            "version": "2.10",
            "pg_config": {"": {"name": "", "desc": "", "ranks": world}},
            "pg_status": {
                "0": {"last_enqueued_collective": n, "last_started_collective": -1, "last_completed_collective": done}
            },
            "entries": ents,
        }
        with open(os.path.join(folder, f"rank_{r}"), "wb") as f:
            pickle.dump(dump, f)


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run(ranks: int, entries: int) -> dict:
    work = tempfile.mkdtemp(prefix="frscale-")
    try:
        write_job(work, ranks, entries)
        workers = inputs.workers_for([os.path.join(work, f"rank_{r}") for r in range(ranks)])
        t0, c0, w0 = time.perf_counter(), time.process_time(), _children_cpu()
        inp = inputs.load([work])
        t1, c1, w1 = time.perf_counter(), time.process_time(), _children_cpu()
        rep = report.build(inp, Config())
        t2, c2 = time.perf_counter(), time.process_time()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    f = rep.findings[0] if rep.findings else None
    return {
        "ranks": ranks,
        "entries": entries,
        "load_s": round(t1 - t0, 2),
        "judge_s": round(t2 - t1, 2),
        "total_s": round(t2 - t0, 2),
        # this process's CPU time: on a shared host the wall clock also counts the other jobs' turns
        "load_cpu_s": round(c1 - c0, 2),
        # the reading workers' CPU time (inputs.read_dumps forks a pool for a large job), on top of this process's
        "load_workers_cpu_s": round(w1 - w0, 2),
        "workers": workers,
        "judge_cpu_s": round(c2 - c1, 2),
        "finding": f.id if f else None,
        "culprit_right": bool(f and f.culprits == (ranks - 1,)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 512, 1024])
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--no-pool", action="store_true", help="read every dump in this process (no reading workers)")
    args = ap.parse_args()
    if args.no_pool:
        inputs.POOL_FILES = sys.maxsize
    for n in args.ranks:
        print(json.dumps(run(n, args.entries)), flush=True)


if __name__ == "__main__":
    main()
