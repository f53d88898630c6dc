"""What a DataLoader, its samplers, its data set and the RNGs are, read from their attributes only."""

from __future__ import annotations

import hashlib
import os
import random
import sys
from typing import Any

from ddpdoctor.rank.probes.check.passes import CHAIN_DEPTH, FP_SAMPLE, FRAMEWORK_PKGS


def _state_digest(obj: Any) -> str:
    return hashlib.sha1(repr(obj).encode()).hexdigest()[:16]


def _sampler_chain(loader: Any) -> list[Any]:
    """The loader's index sampler and the samplers below it (batch_sampler/sampler attributes), outermost first."""
    out: list[Any] = []
    s = getattr(loader, "batch_sampler", None)
    if s is None:
        s = getattr(loader, "sampler", None)
    while s is not None and len(out) < CHAIN_DEPTH and all(s is not x for x in out):
        out.append(s)
        nxt = s.__dict__.get("batch_sampler") if hasattr(s, "__dict__") else None
        if nxt is None:
            nxt = s.__dict__.get("sampler") if hasattr(s, "__dict__") else None
        s = nxt
    return out


def _framework_shard(loader: Any, chain: list[Any]) -> dict[str, Any] | None:
    """A framework layer that shards batches or samples per process (Accelerate's BatchSamplerShard or
    IterableDatasetShard), read from its attributes."""
    for obj in (*chain, getattr(loader, "dataset", None)):
        name = type(obj).__name__
        if name in ("BatchSamplerShard", "IterableDatasetShard"):
            return {
                "by": type(obj).__module__.split(".")[0],
                "layer": name,
                "num_processes": _int_or_none(getattr(obj, "num_processes", None)),
                "process_index": _int_or_none(getattr(obj, "process_index", None)),
                "even_batches": getattr(obj, "even_batches", None),
                "split_batches": getattr(obj, "split_batches", None),
            }
    return None


def _made_by(frame: Any) -> str | None:
    """The training framework whose code built this DataLoader (None: the user's code)."""
    f = frame
    while f is not None:
        mod = str(f.f_globals.get("__name__", "")).split(".")[0]
        # Lightning wraps DataLoader.__init__ (a `wrapper`) while it calls the user's *_dataloader hooks
        if mod not in ("torch", "ddpdoctor", "functools", "contextlib") and not (
            mod in FRAMEWORK_PKGS and f.f_code.co_name in ("wrapper", "init_wrapper")
        ):
            return FRAMEWORK_PKGS.get(mod)
        f = f.f_back
    return None


def _safe_len(ds: Any) -> int | None:
    try:
        return len(ds)
    except Exception:
        return None


def _known(st: list | None, obj: Any) -> bool:
    """Is ``st`` the record of this very object (ids are reused once an object is freed)?"""
    return st is not None and st[3]() is obj


def _int_or_none(v: Any) -> int | None:
    try:
        return int(v)
    except Exception:
        return None


def _batch_digest(batch: Any) -> str:
    """Shapes and float64 sums of the tensors in a batch (lists, tuples, dicts), as a short hash."""
    import torch

    h = hashlib.sha1()
    stack, n = [batch], 0
    while stack and n < 16:
        x = stack.pop()
        if isinstance(x, torch.Tensor):
            n += 1
            t = x.detach()
            h.update(repr((tuple(t.shape), str(t.dtype))).encode())
            if t.numel():
                h.update(repr(float(t.double().sum()) if not t.is_complex() else 0.0).encode())
        elif isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
        else:
            h.update(repr(x)[:64].encode())
    return h.hexdigest()[:16]


def _data_fingerprint(ds: Any) -> str | None:
    """A digest of what a data set holds, read from its attributes only (never ``ds[i]``, which would run
    the user's code): tensors and arrays by shape, dtype and up to FP_SAMPLE strided elements; numbers,
    strings and paths by value; lists by length and their first and last elements; nested data sets.
    Two ranks with different digests hold different data (pre-sharded); None when nothing was readable."""
    h = hashlib.sha1()
    seen: set[int] = set()
    if _fp_into(h, ds, 0, seen) == 0:
        return None
    return h.hexdigest()[:16]


def _fp_into(h: Any, v: Any, depth: int, seen: set[int]) -> int:
    if v is None or isinstance(v, (bool, int, float, str, bytes)):
        h.update(repr(v).encode()[:4096])
        return 1
    if isinstance(v, os.PathLike):
        h.update(os.fspath(v).encode(errors="replace") if isinstance(os.fspath(v), str) else os.fspath(v))
        return 1
    if isinstance(v, range):
        h.update(repr(v).encode())
        return 1
    if id(v) in seen or depth > 4:
        return 0
    seen.add(id(v))
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(v, torch.Tensor):
        try:
            t = v.detach()
            if t.layout != torch.strided or t.device.type == "meta":
                return 0
            flat = t.reshape(-1)
            step = max(1, flat.numel() // FP_SAMPLE)
            part = flat[::step][:FP_SAMPLE].cpu()
            if part.is_complex():
                part = torch.view_as_real(part)
            part = part.to(torch.float64 if part.is_floating_point() else torch.int64)
            h.update(f"T{tuple(t.shape)}{t.dtype}".encode())
            h.update(repr(part.tolist()).encode())
            return 1
        except Exception:
            return 0
    tname = type(v).__module__ + "." + type(v).__name__
    if tname.startswith("numpy.") and hasattr(v, "shape") and hasattr(v, "flat"):
        try:
            step = max(1, int(v.size) // FP_SAMPLE)
            h.update(f"A{tuple(v.shape)}{v.dtype}".encode())
            h.update(repr(v.flat[::step][:FP_SAMPLE].tolist()).encode())
            return 1
        except Exception:
            return 0
    if isinstance(v, (list, tuple)):
        h.update(f"L{len(v)}".encode())
        items = list(v) if len(v) <= 128 else list(v[:64]) + list(v[-64:])
        return 1 + sum(_fp_into(h, x, depth + 1, seen) for x in items)
    if isinstance(v, dict):
        h.update(f"D{len(v)}".encode())
        n = 1
        for key in sorted(v, key=repr)[:64]:
            h.update(repr(key).encode()[:256])
            n += _fp_into(h, v[key], depth + 1, seen)
        return n
    d = getattr(v, "__dict__", None)
    if isinstance(d, dict) and depth <= 2 and not callable(v):
        h.update(type(v).__qualname__.encode())
        n = 0
        for key in sorted(d)[:64]:
            if not key.startswith("__"):
                h.update(key.encode())
                n += _fp_into(h, d[key], depth + 1, seen)
        return n
    return 0


def _rng_digests(torch: Any) -> dict[str, Any]:
    out = {
        "torch_initial_seed": int(torch.initial_seed()),
        "torch": hashlib.sha1(bytes(torch.get_rng_state().tolist())).hexdigest()[:16],
        "random": _state_digest(random.getstate()),
    }
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            out["numpy"] = _state_digest(np.random.get_state()[1].tolist())
        except Exception:  # numpy present but its legacy generator cannot say: numpy's stream is not compared
            pass
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        try:
            out["cuda"] = hashlib.sha1(bytes(torch.cuda.get_rng_state().tolist())).hexdigest()[:16]
        except Exception:  # no generator on this device yet: the CUDA stream is not compared
            pass
    return out
