"""One ``ddpdoctor attach``: find the job(s), dump every rank twice (``interval`` apart) without pausing it,
once more with native frames for the ranks that did not move, write a run directory per job, and with
``--kill`` end the job (launcher first, TERM then KILL, by pid)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

import psutil

from ddpdoctor.attach import dump as dumps
from ddpdoctor.attach.discover import Job, find_jobs
from ddpdoctor.attach.record import main_stack, write
from ddpdoctor.errors import DdpdoctorError, ExitCode
from ddpdoctor.record import schema


@dataclass
class Attached:
    job: Job
    run_dir: str
    seconds: float


def _cpu(pids: list[int]) -> dict[int, float]:
    out = {}
    for q in pids:
        try:
            c = psutil.Process(q).cpu_times()
            out[q] = c.user + c.system
        except psutil.Error:
            pass
    return out


def _confirmed(job: Job, first: dict[int, dumps.Dump]) -> bool:
    """An mp.spawn candidate is a DDP job when its ranks run torch.multiprocessing.spawn's wrapper."""
    if job.kind != "spawn":
        return True
    return any(
        str(f[0]).replace("\\", "/").endswith("torch/multiprocessing/spawn.py")
        for d in first.values()
        for t in d.threads or ()
        for f in t.get("stack") or ()
    )


def describe(job: Job) -> str:
    script = os.path.basename(job.script) if job.script else "?"
    return (
        f"{job.kind} job {script} (launcher pid {job.launcher}, "
        f"{len(job.ranks)} local rank(s) of {job.world_size or '?'}: pids {','.join(map(str, job.pids))})"
    )


def attach(
    pid: int | None,
    run_dir: str | None,
    interval: float,
    timeout: float,
    native: bool,
    several_ok: bool,
    fr_timeout: float | None = None,
) -> list[Attached]:
    """Attach to the job(s) ``pid`` names (or every job of this user here); one run directory per job. With
    ``fr_timeout``, also take each rank's flight recorder where the job offers a trigger (attach/flight.py),
    after the stacks (so that the stacks show the job as it was), within that many seconds."""
    from ddpdoctor.launch import rundir
    from ddpdoctor.record.writer import write_json_atomic

    exe = dumps.py_spy()
    jobs = find_jobs(pid)
    out: list[Attached] = []
    checked: list[tuple[Job, dict[int, dumps.Dump]]] = []
    for job in jobs:
        first = dumps.dump_all(exe, job.pids, timeout)
        if dumps.refused(first):
            why = next(d.error for d in first.values() if d.error.startswith("ptrace refused"))
            raise DdpdoctorError(
                f"cannot read the stacks of {describe(job)}: {why}. {dumps.PTRACE_HELP}", ExitCode.NOT_RUN
            )
        if _confirmed(job, first):
            checked.append((job, first))
    if not checked:
        what = (
            f"pid {pid} is not a torchrun agent, an mp.spawn parent or a rank of a DDP job of this user"
            if pid is not None
            else "no torchrun or mp.spawn job of this user runs on this host"
        )
        raise DdpdoctorError(what, ExitCode.USAGE)
    if len(checked) > 1 and (run_dir or not several_ok):
        raise DdpdoctorError(
            f"{len(checked)} jobs found: choose one with --pid: " + "; ".join(describe(j) for j, _ in checked),
            ExitCode.USAGE,
        )
    for job, first in checked:
        start = time.monotonic()
        t0 = time.time()
        cpu0 = _cpu(job.pids)
        time.sleep(interval)
        last = dumps.dump_all(exe, job.pids, timeout)
        t1 = time.time()
        cpu1 = _cpu(job.pids)
        cpu = {q: round((cpu1[q] - cpu0[q]) / max(t1 - t0, 1e-3), 3) for q in cpu1 if q in cpu0}
        stuck = [
            q
            for q in job.pids
            if last[q].threads is not None
            and first[q].threads is not None
            and main_stack(last[q].threads) == main_stack(first[q].threads)
        ]
        nat = dumps.dump_all(exe, stuck, timeout, native=True) if native else {}
        for q, d in last.items():
            if d.threads is None and first[q].threads is not None and not d.gone:
                last[q] = first[q]  # a second dump that failed: keep the first
        path = rundir.create(
            run_dir or rundir.default_run_dir("attach"),
            {
                "command": schema.CMD_ATTACH,
                "script": job.script,
                "mode": job.kind,
                "timeout": interval,
                "attach": {
                    "launcher": job.launcher,
                    "pids": job.pids,
                    "interval": round(t1 - t0, 3),
                    "native": native,
                    "world_size": job.world_size,
                    "job": job.key,
                    "failed": {str(q): d.error for q, d in last.items() if d.threads is None},
                },
            },
        )
        write(path, job, first, last, nat, t0, t1, cpu)
        if fr_timeout is not None:
            from ddpdoctor.attach import flight

            try:
                fr = flight.take(job, path, fr_timeout).as_manifest()
            except OSError as e:  # the stacks are taken: a file the FR needed does not fail the whole attach
                fr = {"note": f"stacks only, no flight recorder: {e.strerror or e} ({e.filename})"}
            mpath = os.path.join(path, schema.MANIFEST)
            with open(mpath, encoding="utf-8") as f:
                manifest = json.load(f)
            manifest["attach"]["fr"] = fr
            write_json_atomic(mpath, manifest)
        out.append(Attached(job, path, time.monotonic() - start))
    return out


def kill(job: Job, grace: float = 3.0) -> None:
    """End the job: its launcher first (torchrun forwards TERM to its workers), then any rank left and the
    ranks' own children; TERM, ``grace``, KILL, by pid (psutil checks a pid was not reused)."""
    from ddpdoctor.launch.monitor import terminate

    procs: list[psutil.Process] = []
    for q in job.pids:
        try:
            p = psutil.Process(q)
            procs.append(p)
            procs += p.children(recursive=True)
        except psutil.Error:
            pass
    if job.launcher is not None:
        try:
            terminate([psutil.Process(job.launcher)], grace)
        except psutil.Error:
            pass
    terminate([p for p in procs if p.is_running()], grace)
