"""Write what ``attach`` saw as a normal run directory (0700, files 0600), so that ``ddpdoctor analyze``
re-diagnoses it and merges it with the other nodes' attach directories.

Per rank: ``events.jsonl`` (``start``: pid, host, local_rank; ``init``: rank, world_size), one heartbeat
(the user line and the collective the main thread is in, so the report's rank lines read as for ``hang``)
and ``stacks.jsonl`` (kind ``stacks``: every thread's stack, outermost first, ``[file, line, func]``; the
main thread flagged ``main``; ``moved``: whether its main-thread stack changed between the two dumps).
A local rank that had already exited gets ``events.jsonl`` with one ``gone`` record.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

from ddpdoctor.analysis.hang.attach import collective_of
from ddpdoctor.attach.discover import Job
from ddpdoctor.attach.dump import Dump
from ddpdoctor.record import schema
from ddpdoctor.record.writer import JsonlWriter


def main_stack(threads: list[dict[str, Any]] | None) -> list[list[Any]]:
    main = next((t for t in threads or [] if t.get("main")), None)
    return list(main.get("stack") or []) if main else []


def flight_recorder(env: dict[str, str], rank: int) -> dict[str, Any] | None:
    """torch's flight recorder, where the job dumped it (TORCH_FR_DUMP_TEMP_FILE / TORCH_NCCL_DEBUG_INFO_
    TEMP_FILE + rank; torch writes these on an NCCL timeout). JSON dumps are read; pickle dumps are only
    named (nothing is ever unpickled)."""
    prefix = env.get("TORCH_FR_DUMP_TEMP_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
    if not prefix:
        return None
    path = f"{prefix}{rank}"
    try:
        with open(path, "rb") as f:
            data = f.read(8 << 20)
    except OSError:
        return {"file": path, "found": False}
    try:
        obj = json.loads(data)
    except ValueError:
        return {"file": path, "found": True, "format": "not JSON (a pickle dump: read it with torchfrtrace)"}
    entries = obj.get("entries") if isinstance(obj, dict) else None
    tail = []
    for e in (entries or [])[-32:]:
        if isinstance(e, dict):
            tail.append(
                {
                    k: e.get(k)
                    for k in (
                        "record_id",
                        "collective_seq_id",
                        "p2p_seq_id",
                        "profiling_name",
                        "state",
                        "input_sizes",
                        "output_sizes",
                        "time_created_ns",
                    )
                }
            )
    return {"file": path, "found": True, "format": "json", "entries": tail}


def write(
    run_dir: str,
    job: Job,
    first: dict[int, Dump],
    last: dict[int, Dump],
    native: dict[int, Dump],
    t0: float,
    t1: float,
    cpu: dict[int, float],
) -> None:
    host = socket.gethostname()
    ranks_dir = os.path.join(run_dir, schema.RANKS_DIR)
    for rp in job.ranks:
        d = last.get(rp.pid)
        if d is None or d.threads is None:
            continue
        rdir = os.path.join(ranks_dir, str(rp.rank))
        os.makedirs(rdir, mode=0o700, exist_ok=True)
        ev = JsonlWriter(os.path.join(rdir, schema.EVENTS))
        ev.write(
            schema.K_START,
            rp.rank,
            t=t0,
            pid=rp.pid,
            host=host,
            local_rank=rp.local_rank,
            argv=rp.cmdline[:64],
            attached=True,
        )
        ev.write(schema.K_INIT, rp.rank, t=t0, world_size=rp.world_size or job.world_size, backend=None, attached=True)
        ev.close()
        threads = d.threads
        nat = native.get(rp.pid)
        if nat is not None and nat.threads:
            by_tid = {t.get("os_tid"): t.get("native") for t in nat.threads}
            for t in threads:
                if by_tid.get(t.get("os_tid")):
                    t["native"] = by_tid[t.get("os_tid")]
        before = main_stack((first.get(rp.pid) or Dump(rp.pid, None)).threads)
        stack = main_stack(threads)
        st = JsonlWriter(os.path.join(rdir, schema.STACKS))
        st.write(
            schema.K_STACKS,
            rp.rank,
            t=t1,
            request="attach",
            threads=threads,
            moved=before != stack,
            interval=round(t1 - t0, 3),
            cpu=cpu.get(rp.pid),
            pid=rp.pid,
            fr=flight_recorder(rp.env, rp.rank),
        )
        st.close()
        op, ddp = collective_of(stack)
        user = _user_site(stack, job.script)
        pending = {"op": op, "group": None, "seq": "?", "site": user, "since": t0} if op else None
        hb = JsonlWriter(os.path.join(rdir, schema.HEARTBEAT))
        hb.write(
            schema.K_HB,
            rp.rank,
            t=t1,
            step=None,
            seq=None,
            pending=pending,
            where=user,
            in_backward=bool(ddp and not op),
            attached=True,
        )
        hb.close()
    for r in job.missing_local():
        ev = JsonlWriter(os.path.join(ranks_dir, str(r), schema.EVENTS))
        ev.write(schema.K_GONE, r, t=t0, host=host, world_size=job.world_size)
        ev.close()


def _user_site(stack: list[list[Any]], script: str | None) -> list[Any] | None:
    """The innermost frame of the user's code (the script's folder, or outside site-packages/stdlib)."""
    home = os.path.dirname(script) + os.sep if script else None
    for f in reversed(stack):
        path = str(f[0])
        if home and path.startswith(home):
            return [path, int(f[1]), str(f[2])]
        if not (
            path.startswith("<")
            or "site-packages" in path
            or "/lib/python3" in path
            or f"{os.sep}ddpdoctor{os.sep}" in path
        ):
            return [path, int(f[1]), str(f[2])]
    return None
