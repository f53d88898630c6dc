"""Launch the health worker under torchrun (the torchrun options of every command), wait a bounded time,
end every process started, read the ranks' JSON results and judge them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import psutil

from ddpdoctor.analysis.ids import (
    DOCTOR_MASTER_ADDR,
    DOCTOR_MASTER_UNREACHABLE,
    DOCTOR_NO_TORCH,
    DOCTOR_PORT_IN_USE,
    DOCTOR_SOCKET_IFNAME,
)
from ddpdoctor.health import analyze
from ddpdoctor.health import env as env_mod

SIZES = {"gloo": [64 << 10, 1 << 20, 16 << 20], "nccl": [1 << 20, 16 << 20, 128 << 20, 512 << 20]}
_BLOCKING = {DOCTOR_SOCKET_IFNAME, DOCTOR_MASTER_ADDR, DOCTOR_PORT_IN_USE, DOCTOR_NO_TORCH}


def parse_sizes(text: str) -> list[int]:
    """``64K,1M,16M`` -> bytes (K/M/G are powers of 1024; a bare number is bytes)."""
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(part[-1].upper(), 1)
        num = part[:-1] if mult > 1 else part
        if part[-1].upper() == "B":
            num = part[:-1]
            mult = 1
        if not num.isdigit() or int(num) * mult < 8:
            raise ValueError(f"bad size {part!r} (e.g. 64K, 1M, 256M)")
        out.append(int(num) * mult)
    if not out:
        raise ValueError("no sizes")
    return sorted(set(out))


def _expected_world(torchrun: dict[str, Any], targs: list[str]) -> int | None:
    nproc = targs[targs.index("--nproc-per-node") + 1]
    nnodes = str(torchrun.get("nnodes") or "1")
    if nproc.isdigit() and nnodes.isdigit():
        return int(nproc) * int(nnodes)
    return None


def _end(procs: list[psutil.Process], grace: float = 3.0) -> None:
    """TERM, wait, KILL, wait: by pid, as the monitor ends a run's process tree."""
    from ddpdoctor.launch.monitor import terminate

    terminate(procs, grace)


def _read_ranks(run_dir: str) -> dict[int, dict[str, Any]]:
    out = {}
    d = os.path.join(run_dir, "ranks")
    for name in os.listdir(d):
        if name.endswith(".json") and name[:-5].isdigit():
            try:
                with open(os.path.join(d, name), encoding="utf-8") as f:
                    out[int(name[:-5])] = json.load(f)
            except (OSError, ValueError):
                continue
    return out


def _unreachable(log_path: str) -> bool:
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            c = analyze.classify(f.read()[-20000:])
    except OSError:
        return False
    return bool(c and c[0] == DOCTOR_MASTER_UNREACHABLE)


def launch(
    run_dir: str, targs: list[str], worker_args: list[str], deadline_s: float, expected: int | None, rendezvous_s: float
) -> tuple[dict[int, dict[str, Any]], float | None, str]:
    """Run torchrun with the worker; return the ranks' results, the seconds after which it was stopped (or
    None when it ended by itself) and the tail of torchrun's log."""
    log_path = os.path.join(run_dir, "torchrun.log")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *targs,
        "-m",
        "ddpdoctor.health.worker",
        run_dir,
        *worker_args,
    ]
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True)
    finally:
        os.close(fd)
    seen: dict[int, psutil.Process] = {}
    t0 = time.time()
    timed_out = None
    done_at = None
    try:
        while proc.poll() is None:
            try:
                for c in psutil.Process(proc.pid).children(recursive=True):
                    seen.setdefault(c.pid, c)
            except psutil.Error:
                pass
            now = time.time()
            if now - t0 > deadline_s:
                timed_out = deadline_s
                break
            ranks = _read_ranks(run_dir)
            if not ranks and now - t0 > rendezvous_s and _unreachable(log_path):
                timed_out = round(now - t0, 1)  # the rendezvous keeps retrying a master it cannot reach
                break
            if (
                expected
                and len(ranks) >= expected
                and all(r.get("stage") == "done" or r.get("error") for r in ranks.values())
            ):
                done_at = done_at or now
                if now - done_at > 10:  # every rank reported: torchrun only has to reap them
                    break
            time.sleep(0.2)
    finally:
        procs = [proc] if proc.poll() is None else []
        try:
            procs = [psutil.Process(proc.pid)] + psutil.Process(proc.pid).children(recursive=True) if procs else []
        except psutil.Error:
            pass
        left = [p for p in seen.values() if p.is_running() and p not in procs]
        _end(procs + left)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            tail = "\n".join(l for l in f.read()[-20000:].splitlines() if l.strip())
    except OSError:
        tail = ""
    return _read_ranks(run_dir), timed_out, tail


def run_health(
    root: str,
    torchrun: dict[str, Any],
    backend: str,
    timeout: float,
    sizes: list[int] | None,
    min_busbw: float | None,
    echo: Any = None,
) -> dict[str, Any]:
    from ddpdoctor.launch.command import torchrun_args

    t_start = time.time()
    run_dir = os.path.join(root, "health")
    os.makedirs(os.path.join(run_dir, "ranks"), mode=0o700, exist_ok=True)
    os.chmod(root, 0o700)
    os.chmod(run_dir, 0o700)
    os.chmod(os.path.join(run_dir, "ranks"), 0o700)
    env = env_mod.collect(torchrun.get("master_addr"), torchrun.get("master_port"), torchrun.get("node_rank"))
    bk = backend
    if bk == "auto":
        bk = "nccl" if env.get("cuda_available") and (env.get("backends") or {}).get("nccl") else "gloo"
    env_f = env_mod.findings(env, bk)
    targs = torchrun_args(torchrun, spawn=False)
    expected = _expected_world(torchrun, targs)
    sizes = sizes or SIZES.get(bk, SIZES["gloo"])
    blocking = [f for f in env_f if f.severity == "error" and f.id in _BLOCKING]
    if echo:
        echo(
            f"ddpdoctor doctor: health check on {expected or '?'} ranks ({bk}) under torchrun "
            f"({' '.join(targs)}); records in {run_dir}"
        )
    if blocking:
        ranks: dict[int, dict[str, Any]] = {}
        timed_out, tail = None, ""
        skipped = f"collectives not run: {blocking[0].id} (fix the environment first)"
    else:
        skipped = ""
        worker_args = ["--backend", bk, "--timeout", f"{timeout:g}", "--sizes", ",".join(map(str, sizes))]
        ranks, timed_out, tail = launch(run_dir, targs, worker_args, 3 * timeout + 60, expected, timeout)
    world = max((int(r.get("world_size") or 0) for r in ranks.values()), default=0) or (expected or 0)
    collectives = analyze.merge_collectives(ranks, bk)
    bandwidth = analyze.merge_bandwidth(ranks, world)
    fs = list(env_f)
    if not blocking:
        fs += analyze.findings(
            ranks, expected, collectives, bandwidth, bk, min_busbw, timed_out, tail, {f.id for f in env_f}
        )
    env["ranks"] = [
        {"rank": r, "host": (x.get("env") or {}).get("host"), "device": x.get("device"), "stage": x.get("stage")}
        for r, x in sorted(ranks.items())
    ]
    return {
        "run_dir": run_dir,
        "backend": bk,
        "world_size": world,
        "torchrun_args": targs,
        "environment": env,
        "collectives": collectives,
        "bandwidth": bandwidth,
        "findings": fs,
        "skipped": skipped,
        "seconds": round(time.time() - t_start, 1),
        "min_busbw": min_busbw,
    }
