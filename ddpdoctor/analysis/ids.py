"""Every finding id as a typed constant: the code names ids through these, so that a misspelt id is an
import error and a type error, not a finding nobody can select. The catalog (catalog.py) holds each id's
family, severity, verdict and exit code, and a test checks that this list and the catalog are the same. Pure,
stdlib only."""

from __future__ import annotations

from typing import Final

# attach
ATTACH_RUNNING: Final = "attach.running"

# checkpoint
CHECKPOINT_MULTIPLE_WRITERS: Final = "checkpoint.multiple-writers"

# collective
COLLECTIVE_SHAPE_MISMATCH: Final = "collective.shape-mismatch"

# crash
CRASH_ABNORMAL_EXIT: Final = "crash.abnormal-exit"
CRASH_EXCEPTION: Final = "crash.exception"

# data
DATA_MISSING_SET_EPOCH: Final = "data.missing-set-epoch"
DATA_PADDING_DUPLICATES: Final = "data.padding-duplicates"
DATA_SAMPLER_SEED_MISMATCH: Final = "data.sampler-seed-mismatch"
DATA_SHARD_GAPS: Final = "data.shard-gaps"
DATA_SHARD_OVERLAP: Final = "data.shard-overlap"
DATA_UNEVEN_BATCHES: Final = "data.uneven-batches"

# doctor
DOCTOR_CLOCK_SKEW: Final = "doctor.clock-skew"
DOCTOR_COLLECTIVE_FAILED: Final = "doctor.collective-failed"
DOCTOR_COLLECTIVE_WRONG: Final = "doctor.collective-wrong"
DOCTOR_DEBUG_DETAIL: Final = "doctor.debug-detail"
DOCTOR_FR_BUFFER_OFF: Final = "doctor.fr-buffer-off"
DOCTOR_FR_DUMP_TMP: Final = "doctor.fr-dump-tmp"
DOCTOR_FR_HEARTBEAT_TIMEOUT: Final = "doctor.fr-heartbeat-timeout"
DOCTOR_FR_OLD_NAME: Final = "doctor.fr-old-name"
DOCTOR_GPU_ECC: Final = "doctor.gpu-ecc"
DOCTOR_HANG: Final = "doctor.hang"
DOCTOR_INIT_FAILED: Final = "doctor.init-failed"
DOCTOR_LAUNCH_FAILED: Final = "doctor.launch-failed"
DOCTOR_LOW_BUSBW: Final = "doctor.low-busbw"
DOCTOR_MASTER_ADDR: Final = "doctor.master-addr"
DOCTOR_MASTER_UNREACHABLE: Final = "doctor.master-unreachable"
DOCTOR_NO_TORCH: Final = "doctor.no-torch"
DOCTOR_OPEN_FILES: Final = "doctor.open-files"
DOCTOR_PORT_IN_USE: Final = "doctor.port-in-use"
DOCTOR_PROBE_FAILED: Final = "doctor.probe-failed"
DOCTOR_RANK_ERROR: Final = "doctor.rank-error"
DOCTOR_RANK_MISSING: Final = "doctor.rank-missing"
DOCTOR_SHM_SMALL: Final = "doctor.shm-small"
DOCTOR_SOCKET_IFNAME: Final = "doctor.socket-ifname"
DOCTOR_WORLD_SIZE_MISMATCH: Final = "doctor.world-size-mismatch"

# drift
DRIFT_BUFFERS: Final = "drift.buffers"
DRIFT_INIT_MISMATCH: Final = "drift.init-mismatch"
DRIFT_PARAMETERS: Final = "drift.parameters"

# hang
HANG_DIVERGENT_COLLECTIVE: Final = "hang.divergent-collective"
HANG_EARLY_EXIT: Final = "hang.early-exit"
HANG_P2P_DEADLOCK: Final = "hang.p2p-deadlock"
HANG_RANK_CONDITIONAL_COLLECTIVE: Final = "hang.rank-conditional-collective"
HANG_SHAPE_MISMATCH: Final = "hang.shape-mismatch"
HANG_TIMEOUT: Final = "hang.timeout"
HANG_TRANSPORT_STALL: Final = "hang.transport-stall"
HANG_UNEVEN_BATCHES: Final = "hang.uneven-batches"

# memleak
MEMLEAK_AUTOGRAD_GRAPH: Final = "memleak.autograd-graph"
MEMLEAK_CUDA: Final = "memleak.cuda"
MEMLEAK_CUDA_OUTSIDE_ALLOCATOR: Final = "memleak.cuda-outside-allocator"
MEMLEAK_CUDA_RESERVED: Final = "memleak.cuda-reserved"
MEMLEAK_DATALOADER_WORKERS: Final = "memleak.dataloader-workers"
MEMLEAK_PYTHON_OBJECTS: Final = "memleak.python-objects"
MEMLEAK_RSS: Final = "memleak.rss"
MEMLEAK_TENSORS: Final = "memleak.tensors"

# multinode
MULTINODE_LOST_NODE: Final = "multinode.lost-node"
MULTINODE_PARTIAL_VIEW: Final = "multinode.partial-view"

# perf
PERF_GRAD_ACCUM_NO_SYNC: Final = "perf.grad-accum-no-sync"

# postmortem
POSTMORTEM_MIXED_DUMPS: Final = "postmortem.mixed-dumps"
POSTMORTEM_NO_DUMP: Final = "postmortem.no-dump"

# probe
PROBE_INTERNAL_ERROR: Final = "probe.internal-error"

# launch
LAUNCH_RANK_NOT_ENTERED: Final = "launch.rank-not-entered"

# profile
PROFILE_DATALOADER_BOUND: Final = "profile.dataloader-bound"
PROFILE_EXPOSED_COMM: Final = "profile.exposed-comm"
PROFILE_LOW_GPU_UTIL: Final = "profile.low-gpu-util"
PROFILE_STRAGGLER: Final = "profile.straggler"
PROFILE_SUMMARY: Final = "profile.summary"

# run
RUN_FAILED_BEFORE_INIT: Final = "run.failed-before-init"
RUN_NO_DISTRIBUTED: Final = "run.no-distributed"
RUN_NOT_STARTED: Final = "run.not-started"
RUN_RESTARTED: Final = "run.restarted"

# rundir
RUNDIR_RECORDS_MISSING: Final = "rundir.records-missing"

# seed
SEED_IDENTICAL_STREAMS: Final = "seed.identical-streams"

# teardown
TEARDOWN_GLOO_ABORT: Final = "teardown.gloo-abort"
