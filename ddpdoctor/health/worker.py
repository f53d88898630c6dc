"""Rank side of ``ddpdoctor doctor``: run under torchrun as ``-m ddpdoctor.health.worker RUN_DIR ...``.

Checks every collective for correct results on this rank, then times a sweep of sizes. The results go
to ``RUN_DIR/ranks/<rank>.json`` (0600, replaced atomically after each stage, so a rank that hangs or dies
leaves what it did). Every collective is bounded by the process group timeout. Never pickles.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import sys
import time
from typing import Any, Callable

COUNT = 4099  # elements: a prime, so it never divides by the world size
RS_COUNT = 1031  # reduce_scatter: elements per rank (odd)
TARGET_S = 0.25  # bandwidth: time spent per (op, size), after warm-up
MAX_ITERS = 50


def _write(run_dir: str, rank: int, out: dict[str, Any]) -> None:
    path = os.path.join(run_dir, "ranks", f"{rank}.json")
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(out, f)
    os.replace(tmp, path)


def _unsupported(e: BaseException) -> bool:
    s = str(e).lower()
    return any(w in s for w in ("not supported", "unsupported", "does not support", "not implemented"))


def _values(torch: Any, rank: int, n: int, dtype: Any, device: Any, offset: int = 0) -> Any:
    """Small integers (1..7), exact in every dtype checked, different on every rank and index."""
    i = torch.arange(offset, offset + n, dtype=torch.int64)
    return ((i + 3 * rank) % 7 + 1).to(dtype=dtype, device=device)


def _same(torch: Any, got: Any, want: Any) -> tuple[bool, str]:
    got, want = got.detach().to("cpu", torch.float64), want.detach().to("cpu", torch.float64)
    if got.shape != want.shape:
        return False, f"shape {list(got.shape)} instead of {list(want.shape)}"
    bad = (got - want).abs() > 1e-2 * want.abs() + 1e-6
    if bool(bad.any()):
        k = int(bad.nonzero()[0][0])
        return (
            False,
            f"{int(bad.sum())} of {got.numel()} elements wrong; first at index {k}: "
            f"{got[k].item():g} instead of {want[k].item():g}",
        )
    return True, ""


def correctness(
    torch: Any, dist: Any, rank: int, world: int, device: Any, dtypes: list[Any], sync: Callable[[], None]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    everyone = range(world)

    def check(op: str, dtype: Any, nbytes: int, fn: Callable[[], tuple[bool, str]]) -> None:
        row: dict[str, Any] = {"op": op, "dtype": str(dtype).replace("torch.", "") if dtype else "-", "bytes": nbytes}
        t0 = time.perf_counter()
        try:
            ok, detail = fn()
            sync()
            row.update(ok=ok, detail=detail)
        except Exception as e:  # noqa: BLE001 - reported per check, never a traceback
            msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
            row.update(
                ok=None if _unsupported(e) else False,
                supported=not _unsupported(e),
                raised=True,
                detail=f"{type(e).__name__}: {msg}",
            )
        row["seconds"] = round(time.perf_counter() - t0, 4)
        out.append(row)

    for dt in dtypes:
        es = torch.empty((), dtype=dt).element_size()

        def all_reduce(op: Any, red: Callable[[Any], Any], dt: Any = dt) -> tuple[bool, str]:
            t = _values(torch, rank, COUNT, dt, device)
            dist.all_reduce(t, op=op)
            return _same(torch, t, red(torch.stack([_values(torch, r, COUNT, torch.float64, "cpu") for r in everyone])))

        check("all_reduce sum", dt, COUNT * es, lambda: all_reduce(dist.ReduceOp.SUM, lambda s: s.sum(0)))
        check("all_reduce max", dt, COUNT * es, lambda: all_reduce(dist.ReduceOp.MAX, lambda s: s.max(0).values))

        def all_gather(dt: Any = dt) -> tuple[bool, str]:
            bufs = [torch.zeros(COUNT, dtype=dt, device=device) for _ in everyone]
            dist.all_gather(bufs, _values(torch, rank, COUNT, dt, device))
            return _same(
                torch, torch.cat(bufs), torch.cat([_values(torch, r, COUNT, torch.float64, "cpu") for r in everyone])
            )

        check("all_gather", dt, COUNT * es * world, all_gather)

        def reduce_scatter(dt: Any = dt) -> tuple[bool, str]:
            out_t = torch.zeros(RS_COUNT, dtype=dt, device=device)
            dist.reduce_scatter_tensor(out_t, _values(torch, rank, RS_COUNT * world, dt, device))
            want = sum(_values(torch, r, RS_COUNT * world, torch.float64, "cpu") for r in everyone)
            return _same(torch, out_t, want[rank * RS_COUNT : (rank + 1) * RS_COUNT])

        check("reduce_scatter", dt, RS_COUNT * world * es, reduce_scatter)

        def broadcast(dt: Any = dt) -> tuple[bool, str]:
            root = world - 1
            t = _values(torch, rank, COUNT, dt, device)
            dist.broadcast(t, src=root)
            return _same(torch, t, _values(torch, root, COUNT, torch.float64, "cpu"))

        check("broadcast", dt, COUNT * es, broadcast)

        def all_to_all(dt: Any = dt) -> tuple[bool, str]:
            # uneven splits: rank j sends 1 + (i + 2j) % 3 elements to rank i
            def n(j: int, i: int) -> int:
                return 1 + (i + 2 * j) % 3

            send = [n(rank, i) for i in everyone]
            recv = [n(j, rank) for j in everyone]
            t_in = _values(torch, rank, sum(send), dt, device)
            t_out = torch.zeros(sum(recv), dtype=dt, device=device)
            dist.all_to_all_single(t_out, t_in, recv, send)
            parts = []
            for j in everyone:
                start = sum(n(j, i) for i in range(rank))
                parts.append(
                    _values(torch, j, sum(n(j, i) for i in everyone), torch.float64, "cpu")[start : start + recv[j]]
                )
            return _same(torch, t_out, torch.cat(parts))

        # bytes: the whole exchange (the same figure on every rank)
        check("all_to_all", dt, sum(1 + (i + 2 * j) % 3 for i in everyone for j in everyone) * es, all_to_all)

        def send_recv(dt: Any = dt) -> tuple[bool, str]:
            if world < 2:
                return True, "one rank: nothing to send"
            t = _values(torch, rank, COUNT, dt, device)
            buf = torch.zeros(COUNT, dtype=dt, device=device)
            reqs = dist.batch_isend_irecv(
                [dist.P2POp(dist.isend, t, (rank + 1) % world), dist.P2POp(dist.irecv, buf, (rank - 1) % world)]
            )
            for q in reqs:
                q.wait()
            return _same(torch, buf, _values(torch, (rank - 1) % world, COUNT, torch.float64, "cpu"))

        check("send_recv", dt, COUNT * es, send_recv)

    def barrier() -> tuple[bool, str]:
        dist.barrier()
        return True, ""

    check("barrier", None, 0, barrier)
    return out


def sweep(
    torch: Any, dist: Any, rank: int, world: int, device: Any, sizes: list[int], sync: Callable[[], None]
) -> list[dict[str, Any]]:
    """Time each op at each size (float32). ``bytes`` as nccl-tests: the buffer size (all_gather: the
    gathered output, reduce_scatter: the input). The ranks agree on the iteration count first."""
    out: list[dict[str, Any]] = []
    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
        for size in sizes:
            count = max(world, (size // 4) // world * world)
            nbytes = count * 4
            try:
                big = torch.ones(count, dtype=torch.float32, device=device)
                small = torch.ones(count // world, dtype=torch.float32, device=device)
                fn = {
                    "all_reduce": lambda: dist.all_reduce(big),
                    "all_gather": lambda: dist.all_gather_into_tensor(big, small),
                    "reduce_scatter": lambda: dist.reduce_scatter_tensor(small, big),
                    "broadcast": lambda: dist.broadcast(big, src=0),
                }[op]
                t0 = time.perf_counter()
                fn()
                sync()
                first = time.perf_counter() - t0
                iters = torch.tensor([max(2, min(MAX_ITERS, int(TARGET_S / max(first, 1e-6))))], device=device)
                dist.all_reduce(iters, op=dist.ReduceOp.MIN)  # every rank runs the same count
                n = int(iters.item())
                fn()
                sync()
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                sync()
                dt = (time.perf_counter() - t0) / n
                out.append({"op": op, "bytes": nbytes, "iters": n, "time_s": dt})
            except Exception as e:  # noqa: BLE001
                msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
                out.append(
                    {"op": op, "bytes": nbytes, "error": f"{type(e).__name__}: {msg}", "supported": not _unsupported(e)}
                )
                break  # the larger sizes would fail the same way
    return out


def rank_env(torch: Any) -> dict[str, Any]:
    env = {
        k: os.environ.get(k)
        for k in (
            "RANK",
            "LOCAL_RANK",
            "WORLD_SIZE",
            "LOCAL_WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
            "GLOO_SOCKET_IFNAME",
            "NCCL_SOCKET_IFNAME",
            "CUDA_VISIBLE_DEVICES",
        )
    }
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "vars": env,
        "torch": torch.__version__,
        "cuda_devices": torch.cuda.device_count() if torch.cuda.is_available() else 0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ddpdoctor.health.worker")
    ap.add_argument("run_dir")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--sizes", default="")
    ap.add_argument("--no-collectives", action="store_true")
    a = ap.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    out: dict[str, Any] = {"rank": rank, "stage": "start", "collectives": [], "bandwidth": [], "error": None}
    _write(a.run_dir, rank, out)
    import torch
    import torch.distributed as dist

    out["env"] = rank_env(torch)
    backend = a.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    out.update(backend=backend, device=str(device), stage="init")
    _write(a.run_dir, rank, out)
    extra: dict[str, Any] = {"device_id": device} if backend == "nccl" else {}
    try:
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=a.timeout), **extra)
    except Exception as e:  # noqa: BLE001
        msg = str(e).strip().splitlines()[0][:500] if str(e).strip() else type(e).__name__
        out["error"] = {"stage": "init", "type": type(e).__name__, "message": msg}
        _write(a.run_dir, rank, out)
        return 1
    world = dist.get_world_size()
    out["world_size"] = world
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    try:
        # clock skew: every rank reads its wall clock right after one barrier
        dist.barrier()
        out["clock"] = time.time()
        out["stage"] = "collectives"
        _write(a.run_dir, rank, out)
        if not a.no_collectives:
            dtypes = [torch.float32, torch.int64, torch.bfloat16]
            out["collectives"] = correctness(torch, dist, rank, world, device, dtypes, sync)
            out["stage"] = "bandwidth"
            _write(a.run_dir, rank, out)
            sizes = [int(s) for s in a.sizes.split(",") if s]
            out["bandwidth"] = sweep(torch, dist, rank, world, device, sizes, sync)
        out["stage"] = "done"
    except Exception as e:  # noqa: BLE001
        msg = str(e).strip().splitlines()[0][:500] if str(e).strip() else type(e).__name__
        out["error"] = {"stage": out["stage"], "type": type(e).__name__, "message": msg}
    _write(a.run_dir, rank, out)
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass
    return 0 if out["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
