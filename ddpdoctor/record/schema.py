"""The run-directory contract: names and versions shared by the rank side and the analysis side.

Stdlib only. A run directory looks like::

    manifest.json                 {"schema": "ddpdoctor.run", "version": 1, ...}
    monitor.jsonl                 what the monitor observed and decided (verdicts, kills)
    control/dump                  written by the monitor: "please dump stacks" (request id)
    logs/                         torchrun --log-dir (per-rank stdout.log / stderr.log)
    torchrun.log                  torchrun's own messages (agent log, failure summary)
    ranks/<r>/events.jsonl        start, init, finish, exit records of rank r
    ranks/<r>/heartbeat.jsonl     one line per heartbeat tick
    ranks/<r>/ledger.jsonl        one line per collective as issued, one when it returns (cend)
    ranks/<r>/checks.jsonl        check probes: sampler epochs and indices, loaders, seeds, DDP, saves
    ranks/<r>/timeline.jsonl      profile: one line per range (name, category, thread, start/end ns)
    ranks/<r>/memory.jsonl        per-step memory (RSS, CUDA) and tensor/graph censuses
    ranks/<r>/fingerprints.jsonl  parameter and buffer fingerprints
    ranks/<r>/stacks.jsonl        stack + ledger dumps answered on request
    ranks/<r>/counters.json       DDP forward and collective counts, updated in place
    ranks/<r>/error.json          the exception that ended rank r, if any
    ranks/<r>/fatal.txt           faulthandler's stacks if rank r died of a fatal signal
    ranks/<r>/terminated.txt      faulthandler's stacks if rank r was ended with SIGTERM

Every line of a .jsonl file is one JSON object with ``v``, ``kind``, ``rank`` and ``t``.
"""

from __future__ import annotations

SCHEMA = "ddpdoctor.run"
VERSION = 1

MANIFEST = "manifest.json"
MONITOR = "monitor.jsonl"
LAUNCHER = "launcher.jsonl"          # the parent process of mp.spawn-style scripts
RANKS_DIR = "ranks"
CONTROL_DIR = "control"
DUMP_REQUEST = "dump"
LOGS_DIR = "logs"
TORCHRUN_LOG = "torchrun.log"       # torchrun's own agent output (not the workers')

EVENTS = "events.jsonl"
HEARTBEAT = "heartbeat.jsonl"
LEDGER = "ledger.jsonl"
STACKS = "stacks.jsonl"
CHECKS = "checks.jsonl"          # check probes: samplers, loaders, seeds, DDP flags, saves, steps
TIMELINE = "timeline.jsonl"      # profile: ranges (step, forward, backward, optimizer, comm, data)
MEMORY = "memory.jsonl"          # memleak: per-step memory and censuses
FINGERPRINTS = "fingerprints.jsonl"  # parameter/buffer fingerprints
ERROR = "error.json"
COUNTERS = "counters.json"    # live counters (memory-mapped, one JSON object)
TERMINATED = "terminated.txt"  # faulthandler's stacks when the rank was sent SIGTERM
FATAL = "fatal.txt"          # faulthandler output on a fatal signal

# kinds of lines
K_START = "start"          # bootstrap started (pid, argv, host)
K_INIT = "init"            # init_process_group returned (rank, world_size, backend)
K_FINISH = "finish"        # the script returned or called sys.exit (code)
K_HB = "hb"                # heartbeat
K_COLL = "coll"            # a collective (ledger), written when it is issued ("st": "issued")
K_COLL_END = "cend"        # the collective returned: its real sequence range (s0..s1), or its error
K_GPU = "gpu"              # NVML utilisation sample
K_RANGE = "range"          # one timeline range
K_MEM = "mem"              # memory figures of one step
K_CENSUS = "census"        # live tensors / autograd graph census
K_FP = "fp"                # parameter/buffer fingerprints
K_STACKS = "stacks"        # a stack/ledger dump
K_VERDICT = "verdict"      # monitor: a verdict reached while running
K_EXIT = "exit"            # monitor: torchrun ended (returncode)
K_KILL = "kill"            # monitor: the process tree was ended (reason)
K_SPAWNED = "spawned"      # monitor: torchrun started (pid)
K_JOIN = "join"            # rank: the script entered DDP's join() context (uneven inputs by design)
