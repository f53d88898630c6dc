"""The flight-recorder and NCCL watchdog settings people get wrong, for ``ddpdoctor doctor``: the buffer
size under its old and new name, dumps to a node-local /tmp that the job's teardown removes, the watchdog's
heartbeat timeout mistaken for the collective timeout, TORCH_DISTRIBUTED_DEBUG=DETAIL left on.

Names and fallbacks are torch's (torch 2.13): ``FlightRecorder.hpp`` reads TORCH_FR_BUFFER_SIZE before
TORCH_NCCL_TRACE_BUFFER_SIZE, the dump prefix is TORCH_FR_DUMP_TEMP_FILE (old: TORCH_NCCL_DEBUG_INFO_TEMP_FILE,
default /tmp/nccl_trace_rank_); ``ProcessGroupNCCL.hpp``: dumping on a watchdog timeout needs
TORCH_NCCL_ENABLE_MONITORING=1 and a buffer size > 0. ``collect`` reads the environment; ``findings`` is pure.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ddpdoctor.analysis.findings import Finding
from ddpdoctor.analysis.ids import (
    DOCTOR_DEBUG_DETAIL,
    DOCTOR_FR_BUFFER_OFF,
    DOCTOR_FR_DUMP_TMP,
    DOCTOR_FR_HEARTBEAT_TIMEOUT,
    DOCTOR_FR_OLD_NAME,
)

# (new name, old name): torch reads the new one first
RENAMED = (
    ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"),
    ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"),
    ("TORCH_FR_CPP_STACK", "TORCH_NCCL_TRACE_CPP_STACK"),
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"),
    ("TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT"),
    ("TORCH_NCCL_DESYNC_DEBUG", "NCCL_DESYNC_DEBUG"),
)
VARS = tuple(n for pair in RENAMED for n in pair) + (
    "TORCH_NCCL_DUMP_ON_TIMEOUT",
    "TORCH_NCCL_ENABLE_MONITORING",
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
    "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC",
    "TORCH_NCCL_DEBUG_INFO_PIPE_FILE",
    "TORCH_DISTRIBUTED_DEBUG",
)
DEFAULT_PREFIX = "/tmp/nccl_trace_rank_"
NODE_LOCAL = ("/tmp/", "/var/tmp/", "/dev/shm/", "/run/")
HEARTBEAT_MIN_S = 60  # torch's default is 480 s; below a minute a busy node's slow CUDA call aborts the job


def collect(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings as set (unset ones left out), and whether the dump folder exists."""
    environ = os.environ if environ is None else environ
    got: dict[str, Any] = {"vars": {k: environ[k] for k in VARS if k in environ}}
    prefix = _value(got["vars"], "TORCH_FR_DUMP_TEMP_FILE") or DEFAULT_PREFIX
    got["dump_prefix"] = prefix
    got["dump_dir_exists"] = os.path.isdir(os.path.dirname(prefix) or ".")
    return got


def _value(v: Mapping[str, str], new: str) -> str | None:
    old = dict(RENAMED).get(new)
    return v.get(new) if new in v else (v.get(old) if old else None)


def _int(s: str | None) -> int | None:
    try:
        return int(str(s).strip())
    except (TypeError, ValueError):
        return None


def findings(settings: Mapping[str, Any]) -> list[Finding]:
    """The findings of ``collect``'s result."""
    v: Mapping[str, str] = settings.get("vars") or {}
    out: list[Finding] = []
    for new, old in RENAMED:
        if old not in v:
            continue
        if new in v and v[new] != v[old]:
            out.append(
                Finding(
                    DOCTOR_FR_OLD_NAME,
                    "warning",
                    f"{old}={v[old]} and {new}={v[new]} are both set: torch reads {new} and ignores {old}",
                    f"Unset {old} and keep one value in {new}.",
                    evidence={"new": new, "old": old},
                )
            )
        elif new not in v:
            out.append(
                Finding(
                    DOCTOR_FR_OLD_NAME,
                    "note",
                    f"{old} is the old name of {new}: still read, but {new} wins when both are set "
                    "(a launcher that sets the new one silently overrides yours)",
                    f"Rename it to {new}.",
                    evidence={"new": new, "old": old},
                )
            )
    size = _int(_value(v, "TORCH_FR_BUFFER_SIZE"))
    fr_on = size is None or size > 0  # torch's default is 2000 entries
    prefix = str(settings.get("dump_prefix") or DEFAULT_PREFIX)
    # asked for: an explicit dump switch, a dump prefix, or a buffer size set on purpose
    dump_wanted = bool(
        v.get("TORCH_NCCL_DUMP_ON_TIMEOUT", "") not in ("", "0")
        or _value(v, "TORCH_FR_DUMP_TEMP_FILE")
        or (size or 0) > 0
    )
    if dump_wanted and size == 0:
        out.append(
            Finding(
                DOCTOR_FR_BUFFER_OFF,
                "warning",
                "dumps are asked for (TORCH_NCCL_DUMP_ON_TIMEOUT / TORCH_FR_DUMP_TEMP_FILE) but the "
                "flight recorder's buffer size is 0: every dump is empty",
                "Set TORCH_FR_BUFFER_SIZE=2000 (or more for long pipelines).",
                evidence=dict(v),
            )
        )
    if fr_on and dump_wanted and os.path.abspath(prefix).startswith(NODE_LOCAL):
        out.append(
            Finding(
                DOCTOR_FR_DUMP_TMP,
                "warning",
                f"flight-recorder dumps go to {prefix}<rank>, on node-local storage: a container's or "
                "a scheduler's teardown (Kubernetes pods, SLURM's private /tmp) removes them with the "
                "job, exactly when they are needed",
                "Point TORCH_FR_DUMP_TEMP_FILE at shared, persistent storage, e.g. "
                "TORCH_FR_DUMP_TEMP_FILE=/shared/$JOB_ID/fr/rank_ (the folder must exist).",
                evidence={"prefix": prefix},
            )
        )
    if dump_wanted and settings.get("dump_dir_exists") is False:
        out.append(
            Finding(
                DOCTOR_FR_DUMP_TMP,
                "error",
                f"the folder of TORCH_FR_DUMP_TEMP_FILE ({os.path.dirname(prefix)}) does not exist here: "
                "torch does not create it, and the dumps are lost",
                f"mkdir -p {os.path.dirname(prefix)} on every node before the job.",
                evidence={"prefix": prefix},
            )
        )
    hb = _int(v.get("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"))
    if v.get("TORCH_NCCL_ENABLE_MONITORING") == "0" and dump_wanted:
        out.append(
            Finding(
                DOCTOR_FR_HEARTBEAT_TIMEOUT,
                "warning",
                "TORCH_NCCL_ENABLE_MONITORING=0 with flight-recorder dumps asked for: the monitor thread "
                "is what dumps on a watchdog timeout, so a hung job leaves no dump",
                "Leave TORCH_NCCL_ENABLE_MONITORING at 1 (the default).",
                evidence=dict(v),
            )
        )
    if hb is not None and hb < HEARTBEAT_MIN_S:
        out.append(
            Finding(
                DOCTOR_FR_HEARTBEAT_TIMEOUT,
                "warning",
                f"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC={hb}: this is not the collective timeout (that is "
                "init_process_group(timeout=...), 10 min on NCCL) but how long the watchdog thread itself "
                f"may stall before the process is aborted; below {HEARTBEAT_MIN_S} s a slow CUDA call on "
                "a busy node aborts a healthy job, often before its dump is written",
                "Leave it at torch's default (480 s); to fail faster on a hang lower "
                "init_process_group(timeout=...) instead.",
                evidence={"heartbeat_s": hb},
            )
        )
    wait_ms = _int(v.get("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC"))
    if hb is not None and wait_ms is not None and wait_ms > hb * 1000:
        out.append(
            Finding(
                DOCTOR_FR_HEARTBEAT_TIMEOUT,
                "warning",
                f"TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC={wait_ms} is longer than the heartbeat timeout "
                f"({hb} s): the monitor aborts the process before the dump it waits for is written",
                "Keep the dump wait well below TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC.",
                evidence={"heartbeat_s": hb, "wait_ms": wait_ms},
            )
        )
    if v.get("TORCH_DISTRIBUTED_DEBUG", "").upper() == "DETAIL":
        out.append(
            Finding(
                DOCTOR_DEBUG_DETAIL,
                "warning",
                "TORCH_DISTRIBUTED_DEBUG=DETAIL is set: every process group is wrapped in a checking "
                "wrapper (an extra gloo collective per call to compare shapes across ranks) and DDP logs "
                "per-iteration details: slow, meant for a debugging run, not production",
                "Unset it (or use INFO) for production runs; for hangs use the flight recorder or ddpdoctor.",
                evidence={"TORCH_DISTRIBUTED_DEBUG": v["TORCH_DISTRIBUTED_DEBUG"]},
            )
        )
    return out
