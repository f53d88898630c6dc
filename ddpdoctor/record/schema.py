"""The run-directory contract: names and versions shared by the rank side and the analysis side.

Stdlib only. A run directory looks like::

    manifest.json                 {"schema": "ddpdoctor.run", "version": 1, ...}
    monitor.jsonl                 what the monitor observed and decided (verdicts, kills)
    control/dump                  written by the monitor: "please dump stacks" (request id)
    logs/                         torchrun --log-dir (per-rank stdout.log / stderr.log)
    torchrun.log                  torchrun's own messages (agent log, failure summary)
    ranks/<r>/events.jsonl        start, init, finish, exit records of rank r
    ranks/<r>/heartbeat.jsonl     one line per heartbeat tick (a ring: see below)
    ranks/<r>/heartbeat.prev.jsonl  the previous heartbeat segment
    ranks/<r>/ledger.jsonl        one line per collective as issued, one when it returns (cend) (a ring)
    ranks/<r>/ledger.prev.jsonl   the previous ledger segment
    ranks/<r>/checks.jsonl        check probes: sampler epochs and indices, loaders, seeds, DDP, saves
    ranks/<r>/timeline.jsonl      profile: one line per range (name, category, thread, start/end ns)
    ranks/<r>/memory.jsonl        per-step memory (RSS, CUDA) and tensor/graph censuses
    ranks/<r>/fingerprints.jsonl  parameter and buffer fingerprints
    ranks/<r>/stacks.jsonl        stack + ledger dumps answered on request
    ranks/<r>/counters.json       DDP forward and collective counts, updated in place
    ranks/<r>/flight.json         torch's flight recorder (every collective of every group, frames), as JSON
    ranks/<r>/error.json          the exception that ended rank r, if any
    ranks/<r>/fatal.txt           faulthandler's stacks if rank r died of a fatal signal
    ranks/<r>/terminated.txt      faulthandler's stacks if rank r was ended with SIGTERM

Every line of a .jsonl file is one JSON object with ``v``, ``kind``, ``rank`` and ``t``.

Rings (issue 10): the ledger and the heartbeat file are bounded. After ``2 * LEDGER_RING`` ledger lines
(``HB_RING`` heartbeat lines) the file is renamed to ``<name>.prev.jsonl`` (replacing the older
segment) and a fresh one started, so at least the last ``LEDGER_RING`` collectives (``HB_RING`` beats)
and at most twice that stay on disk. A reader reads ``.prev`` then the current file; a ``cend`` line whose
``coll`` was rotated away is dropped. Run directories without ``.prev`` files (older runs) read the same.
Running counts survive the ring: each heartbeat and the finish event carry ``ncoll`` and ``seq``
(per group, the whole run's count).
"""

from __future__ import annotations

SCHEMA = "ddpdoctor.run"
# the run directory's format (manifest "version"). 2: a routine collective is one ledger line (its return is
# implied by the next line, and for the newest by counters.json's "ended"); the ledger file may end in NUL
# bytes (memory-mapped, writer.MappedRingWriter). Version 1 (every collective a coll + cend pair) is read too.
VERSION = 2
READABLE = (1, 2)
LINE_VERSION = 1  # each line's "v": the layout of one line (unchanged by version 2)

MANIFEST = "manifest.json"
# the launcher form (launch/entry.py writes it into the user's command's environment, rank/enter.py reads it):
# JSON with the run directory, the folder of ddpdoctor's sitecustomize, where ddpdoctor is installed, and the
# user's own PYTHONPATH (null: none)
ENTER_ENV = "DDPDOCTOR_ENTER"
MONITOR = "monitor.jsonl"
LAUNCHER = "launcher.jsonl"  # the parent process of mp.spawn-style scripts
RANKS_DIR = "ranks"
CONTROL_DIR = "control"
DUMP_REQUEST = "dump"
LOGS_DIR = "logs"
TORCHRUN_LOG = "torchrun.log"  # torchrun's own agent output (not the workers')
# torchrun --max-restarts: attempt k > 0 of the worker group (TORCHELASTIC_RESTART_COUNT=k) keeps its records in
# attempts/<k>/, a run directory of its own (manifest copy with "attempt": k, ranks/, control/); attempt 0 is the
# run directory itself, so a run without restarts reads as before (record/attempts.py)
ATTEMPTS_DIR = "attempts"

EVENTS = "events.jsonl"
HEARTBEAT = "heartbeat.jsonl"
LEDGER = "ledger.jsonl"
# where a rank's collectives are recorded (DDPDOCTOR_COLLECTIVES, manifest "collectives"): torch's flight recorder for
# every op it records, the wrappers for the rest (the default), or the wrappers for every op (the fallback kept for a
# running digest of every call since the start)
COLLECTIVES_MODES = ("recorder", "wrappers")
LEDGER_RING = 4096  # collectives kept at least (DDPDOCTOR_LEDGER_RING or manifest "ledger_ring")
HB_RING = 512  # heartbeats kept at least (DDPDOCTOR_HB_RING or manifest "hb_ring")
STACKS = "stacks.jsonl"
CHECKS = "checks.jsonl"  # check probes: samplers, loaders, seeds, DDP flags, saves, steps
TIMELINE = "timeline.jsonl"  # profile: ranges (step, forward, backward, optimizer, comm, data)
MEMORY = "memory.jsonl"  # memleak: per-step memory and censuses
FINGERPRINTS = "fingerprints.jsonl"  # parameter/buffer fingerprints
ERROR = "error.json"
COUNTERS = "counters.json"  # live counters (memory-mapped, one JSON object)
FLIGHT = "flight.json"  # torch's flight recorder, dumped by the rank as JSON in torch's dump shape (record/flight.py)
TERMINATED = "terminated.txt"  # faulthandler's stacks when the rank was sent SIGTERM
FATAL = "fatal.txt"  # faulthandler output on a fatal signal

# kinds of lines
K_START = "start"  # bootstrap started (pid, argv, host)
K_INIT = "init"  # init_process_group returned (rank, world_size, backend)
K_FINISH = "finish"  # the script returned or called sys.exit (code)
K_HB = "hb"  # heartbeat
K_COLL = "coll"  # a collective (ledger), written when it is issued ("st": "issued")
K_COLL_END = "cend"  # the collective returned: its real sequence range (s0..s1), or its error
K_GPU = "gpu"  # NVML utilisation sample
K_RANGE = "range"  # one timeline range
K_MEM = "mem"  # memory figures of one step
K_CENSUS = "census"  # live tensors / autograd graph census
K_FP = "fp"  # parameter/buffer fingerprints
K_STACKS = "stacks"  # a stack/ledger dump
K_VERDICT = "verdict"  # monitor: a verdict reached while running
K_EXIT = "exit"  # monitor: torchrun ended (returncode)
K_KILL = "kill"  # monitor: the process tree was ended (reason)
K_SPAWNED = "spawned"  # monitor: torchrun started (pid)
K_RESTART = "restart"  # monitor: torchrun restarted the worker group; the monitor follows attempt (k) now
K_JOIN = "join"  # rank: the script entered DDP's join() context (uneven inputs by design)
K_ORPHANED = "orphaned"  # rank: the monitor is gone; the rank ends itself (events.jsonl)
K_PROBE_ERROR = "probe_error"  # rank: one of ddpdoctor's own wrappers failed and let the call through unrecorded
K_DATALOADER = "dataloader"  # rank: a DataLoader iteration began (len, sampler, site) (events.jsonl)

# check probes (checks.jsonl)
K_SAMPLER_INIT = "sampler_init"  # a DistributedSampler was built
K_SAMPLER = "sampler"  # one pass of a DistributedSampler: its indices (or their digest)
K_SAMPLER_END = "sampler_end"  # ... its window closed (consumed, exhausted, steps inside)
K_SAMPLER_TRAIN = "sampler_train"  # ... a step or a forward with grad ran inside it
K_SET_EPOCH = "set_epoch"  # sampler.set_epoch(e)
K_LOADER = "loader"  # a DataLoader was built (sampler chain, data set, shard layer)
K_LOADER_PASS = "loader_pass"  # what one pass of a DataLoader iterator fetched
K_LOADER_TRAIN = "loader_train"  # a loader fed training (once per loader and cause)
K_OPTSTEP = "optstep"  # an optimizer step (the first OPTSTEP_DETAIL of them)
K_ACCUM_SUMMARY = "accum_summary"  # synced/unsynced forwards per optimizer step, as a histogram
K_SEED = "seed"  # torch.manual_seed(s)
K_DDP = "ddp"  # a DDP model was built (flags, batchnorm, RNG digests)
K_RNG_FIRST_STEP = "rng_first_step"  # RNG digests at the first training forward
K_SAVE = "save"  # torch.save (path, step)
K_COUNTERS = "counters"  # counters.json's one object

# memory probes (memory.jsonl)
K_MEM_OVERHEAD = "mem_overhead"  # what the scans and censuses cost
K_WORKER_PASS = "worker_pass"  # a DataLoader iterator with worker processes began a pass (pids, the Dataset's stores)
K_WORKER_MEM = "worker_mem"  # USS, PSS and RSS of one iterator's worker processes, about once a second
CUDA_SUMMARY = "cuda_memory_summary_{}.txt"  # torch.cuda.memory_summary at first/census/last, per rank
CUDA_SNAPSHOT = "cuda_snapshot_{}.pickle"  # --snapshot: the allocator's history (growth/last), for memory_viz
K_CUDA_SNAPSHOT = "cuda_snapshot"  # a --snapshot dump written (or "none": no CUDA on this rank)

# profile (timeline.jsonl)
K_SAMPLES = "samples"  # main-thread line samples per phase (deltas)
K_PROFILE_INFO = "profile_info"  # steps, buckets, AMP, sampling period
K_TUNE_DDP = "tune_ddp"  # tune: the script's own DDP arguments, and the ones the arm set
K_TUNE_LOADER = "tune_loader"  # tune: a DataLoader's num_workers (script's, arm's), its dataset's kind
K_TUNE_HOOK = "tune_hook"  # tune: the compression hook registered, or why not

# files the tool writes into the run directory after the run
TRACE_JSON = "trace.json"  # Perfetto/Chrome trace of every rank's ranges
MEMORY_SVG = "memory.svg"  # RSS / CUDA / census curves
NSYS_DIR = "nsys"  # Nsight Systems reports, one per rank (profile --nsys)
REPORT_HTML = "report.html"  # the report with its pictures, for a browser

# collectives: the vocabulary both sides use
SHAPED = frozenset(
    {
        "all_reduce",
        "broadcast",
        "reduce",
        "all_gather",
        "all_gather_into_tensor",
        "reduce_scatter",
        "reduce_scatter_tensor",
    }
)  # tensor shapes must agree across ranks
# all_to_all_single is not among them: with split sizes (MoE token routing) each rank's input and output
# sizes differ by design, and comparing them blamed a healthy exchange for a hang elsewhere (torch's own
# analyzer leaves all_to_all's sizes undecided too)
P2P = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv"})
RECVS = frozenset({"recv", "irecv"})  # point-to-point receives
OTHER = frozenset(
    {
        "gather",
        "scatter",
        "all_to_all",
        "all_to_all_single",
        "barrier",
        "monitored_barrier",
        "all_gather_object",
        "broadcast_object_list",
        "gather_object",
        "scatter_object_list",
    }
)  # only the op is compared
# `ddpdoctor attach` (a job started without ddpdoctor; stacks read from outside with py-spy)
CMD_ATTACH = "attach"  # manifest "command" of an attach run directory
K_GONE = "gone"  # attach: a rank of this node had exited before ddpdoctor attached
FR_DIR = "fr"  # attach: the flight-recorder dumps taken from the running ranks (rank_<r>, as torch wrote them)
FR_EARLIER_DIR = "fr-earlier"  # attach: a rank's dump file as it was before attach asked for a new one
# the states of a ledger entry ("st"): written "issued", folded by the reader from its cend line
ST_ISSUED = "issued"  # issued, not returned yet (its sequence range predicted)
ST_DONE = "done"  # returned (entries without "st", from older runs, are done too)
ST_ASYNC = "async"  # returned a Work (async_op=True); its wait is the rank's own
ST_ERROR = "error"  # raised (the cend line's "err")
