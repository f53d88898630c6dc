"""Memory probes for ``ddpdoctor memleak``: per step RSS (and CUDA allocator/NVML figures where a GPU
is in use); every so often a census of live tensors and autograd graphs, with who holds them.

Per step (an optimizer step, or a DDP forward where there is no optimizer) the cost is one
``memory_info()`` call and one line. The census walks ``gc.get_objects()``; it runs at the first step,
then whenever it would cost at most ``budget`` of the time since the last one (default 2 %), or every
``census_every`` steps when the user asks for that.
"""

from __future__ import annotations

import ast
import gc
import os
import sys
import threading
import time
from collections import defaultdict
from typing import Any

from ddpdoctor.record import schema
from ddpdoctor.record.writer import JsonlWriter
from ddpdoctor.rank import sites

GRAPH_NODE_CAP = 200_000
LOCAL_EVERY = 5           # steps between scans of the graphs held by the user's variables
LOCAL_NODE_CAP = 50_000
TOP_GROUPS = 12


class Memory:
    def __init__(self, probe: Any, census_every: int | None, budget: float = 0.02) -> None:
        import psutil

        self.p = probe
        self.proc = psutil.Process()
        self.w = JsonlWriter(os.path.join(probe.dir, schema.MEMORY))
        self.census_every = census_every
        self.budget = budget
        self.step = 0
        self.by_optimizer = False
        self.last_census_t = 0.0
        self.last_census_cost = 0.0
        self.peak_cuda = -1
        self.cuda_dev: int | None = None
        self.nvml: Any = None
        self.summaries: dict[str, str] = {}

    # -- per step ------------------------------------------------------------------------------------
    def on_step(self, source: str) -> None:
        if source == "optimizer":
            self.by_optimizer = True
        elif self.by_optimizer:
            return  # with an optimizer, a step is an optimizer step
        self.step += 1
        fields: dict[str, Any] = {"rss": self.proc.memory_info().rss}
        fields.update(self._cuda())
        if self.step % LOCAL_EVERY == 0 or self.step == 1:
            nodes, holder = _local_graphs(_caller(2))
            fields["local_graph"] = nodes
            if holder:
                fields["local_holder"] = holder
        self.w.write(schema.K_MEM, self.p.rank, step=self.step, **fields)
        now = time.perf_counter()
        due = (self.step == 1 or
               (self.census_every and self.step % self.census_every == 0) or
               (not self.census_every and now - self.last_census_t >= self.last_census_cost / self.budget))
        if due:
            self.census(_caller(2))

    def _cuda(self) -> dict[str, Any]:
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return {}
        try:
            dev = torch.cuda.current_device()
            st = torch.cuda.memory_stats(dev)
            out = {"cuda_allocated": st.get("allocated_bytes.all.current", 0),
                   "cuda_reserved": st.get("reserved_bytes.all.current", 0),
                   "cuda_active": st.get("active_bytes.all.current", 0)}
            out.update(self._nvml(dev))
            if out["cuda_allocated"] > self.peak_cuda:
                self.peak_cuda = out["cuda_allocated"]
                self.summaries["peak"] = torch.cuda.memory_summary(dev)
            if "first" not in self.summaries:
                self.summaries["first"] = torch.cuda.memory_summary(dev)
                self._write_summary("first")
            return out
        except Exception:
            return {}

    def _nvml(self, dev: int) -> dict[str, Any]:
        try:
            import pynvml

            if self.nvml is None:
                pynvml.nvmlInit()
                self.nvml = pynvml.nvmlDeviceGetHandleByIndex(dev)
            info = pynvml.nvmlDeviceGetMemoryInfo(self.nvml)
            return {"nvml_used": int(info.used), "nvml_total": int(info.total)}
        except Exception:
            return {}

    def _write_summary(self, which: str) -> None:
        text = self.summaries.get(which)
        if text:
            path = os.path.join(self.p.dir, f"cuda_memory_summary_{which}.txt")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)

    # -- census --------------------------------------------------------------------------------------
    def census(self, frame: Any) -> None:
        import torch

        t0 = time.perf_counter()
        objs = gc.get_objects()
        n_objs = len(objs)
        # type() instead of isinstance(): no __class__ lookups (some torch objects warn on them), and fast
        kinds = self._tensor_types(torch)
        tensors = [o for o in objs if type(o) in kinds]
        del objs
        groups: dict[tuple, list] = defaultdict(lambda: [0, 0])
        graph_roots = []
        for o in tensors:
            try:
                dev = str(o.device)
                nbytes = o.numel() * o.element_size() if o.layout == torch.strided else 0
                gf = o.grad_fn
                key = (tuple(o.shape), str(o.dtype)[6:], dev, gf is not None)
                g = groups[key]
                g[0] += 1
                g[1] += nbytes
                if gf is not None:
                    graph_roots.append(o)
            except Exception:
                continue
        del tensors
        nodes, biggest = _graph_nodes(graph_roots)
        top = sorted(groups.items(), key=lambda kv: -kv[1][1])[:TOP_GROUPS]
        top += [kv for kv in groups.items() if kv[0][3] and kv not in top][:TOP_GROUPS]
        by_dev: dict[str, int] = defaultdict(int)
        for (shape, dtype, dev, _g), (cnt, nb) in groups.items():
            by_dev[dev] += nb
        holders = _holders(frame, [t for t, _n in biggest[:3]] + _samples(graph_roots, top))
        children = self._worker_rss()
        self.last_census_cost = time.perf_counter() - t0
        self.last_census_t = time.perf_counter()
        self.w.write(schema.K_CENSUS, self.p.rank, step=self.step, objects=n_objs, tensor_bytes=dict(by_dev),
                     tensors=sum(c for c, _ in groups.values()), graph_nodes=nodes,
                     groups=[{"shape": list(k[0]), "dtype": k[1], "device": k[2], "grad_fn": k[3], "count": v[0],
                              "bytes": v[1]} for k, v in top],
                     biggest_graphs=[{"nodes": n, "shape": list(t.shape), "holder": holders.get(id(t))}
                                     for t, n in biggest[:3]],
                     group_holders={f"{list(k[0])}|{k[1]}|{k[2]}|{k[3]}": h for k, h in
                                    ((k, holders.get(("group", k))) for k, _v in top) if h},
                     workers=children, uss=self._uss(), host_available=self._available(),
                     cost_s=round(self.last_census_cost, 4))

    def _available(self) -> int | None:
        try:
            import psutil

            return int(psutil.virtual_memory().available)
        except Exception:
            return None

    @staticmethod
    def _tensor_types(torch: Any) -> set:
        kinds = {torch.Tensor, torch.nn.Parameter}
        try:
            kinds.add(torch.nn.parameter.Buffer)
        except AttributeError:
            pass
        return kinds

    def _uss(self) -> int | None:
        try:
            return int(self.proc.memory_full_info().uss)
        except Exception:
            return None

    def _worker_rss(self) -> dict[str, int]:
        """RSS of this rank's worker processes (DataLoader workers are multiprocessing children: listed
        without scanning /proc)."""
        import multiprocessing

        import psutil

        out = {}
        for c in multiprocessing.active_children():
            try:
                out[str(c.pid)] = int(psutil.Process(c.pid).memory_info().rss)
            except Exception:
                pass
        return out

    def finish(self) -> None:
        # no census here: the script has returned and its locals are gone
        try:
            torch = sys.modules.get("torch")
            if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
                self.summaries["last"] = torch.cuda.memory_summary()
            for which in ("peak", "last"):
                self._write_summary(which)
        except Exception:
            pass


def _caller(depth: int) -> Any:
    """The frame ``depth`` levels above the caller, or the outermost one on a shallow stack."""
    f = sys._getframe(1)
    for _ in range(depth):
        if f.f_back is None:
            break
        f = f.f_back
    return f


def _graph_nodes(roots: list) -> tuple[int, list]:
    """Autograd nodes reachable from live tensors (shared nodes once), and the biggest graphs."""
    seen: set[int] = set()
    per_root = [(t, _walk(t.grad_fn, seen, GRAPH_NODE_CAP)) for t in roots]
    per_root.sort(key=lambda x: -x[1])
    return len(seen), per_root


def _walk(fn: Any, seen: set[int], cap: int) -> int:
    """Add the autograd nodes reachable from ``fn`` to ``seen`` (up to ``cap``); return how many were new."""
    before = len(seen)
    stack = [fn]
    while stack and len(seen) < cap:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        try:
            stack.extend(nf for nf, _ in fn.next_functions)
        except Exception:
            pass
    return len(seen) - before


def _user_scopes(frame: Any) -> list[tuple[Any, dict]]:
    """(frame, namespace) for the locals of every user frame on the stack and the globals of each user
    module on it (once per module)."""
    scopes: list[tuple[Any, dict]] = []
    modules: set[int] = set()
    f = frame
    while f is not None:
        if sites.is_user_file(f.f_code.co_filename):
            scopes.append((f, f.f_locals))
            if id(f.f_globals) not in modules:
                modules.add(id(f.f_globals))
                scopes.append((f, f.f_globals))
        f = f.f_back
    return scopes


def _local_graphs(frame: Any) -> tuple[int, dict | None]:
    """Autograd nodes reachable from the user's own variables (locals of the user's frames, globals of
    the script): cheap enough for every few steps, and it names the variable that holds the most."""
    torch = sys.modules["torch"]
    Tensor = torch.Tensor
    seen: set[int] = set()
    best: tuple[int, Any, str] | None = None
    for fr, ns in _user_scopes(frame):
        if len(ns) > 5000:
            continue
        for name, val in list(ns.items()):
            if isinstance(val, Tensor):
                roots, how = [val], ""
            elif isinstance(val, (list, tuple)) and 0 < len(val) <= 100_000 and isinstance(val[-1], Tensor):
                roots, how = val, "[]"
            elif isinstance(val, dict) and 0 < len(val) <= 100_000:
                roots, how = [v for v in val.values() if isinstance(v, Tensor)], "{}"
            else:
                continue
            n = sum(_walk(t.grad_fn, seen, LOCAL_NODE_CAP) for t in roots if isinstance(t, Tensor))
            if n and (best is None or n > best[0]):
                best = (n, fr, name + how)
    holder = None
    if best is not None:
        n, fr, name = best
        holder = {"name": name, "nodes": n, "file": fr.f_code.co_filename, "func": fr.f_code.co_name,
                  "line": _store_line(fr.f_code.co_filename, name.rstrip("[]{}"), fr.f_code) or fr.f_lineno}
    return len(seen), holder


def _samples(roots: list, top: list) -> list:
    keys = {k for k, _v in top if k[3]}
    out, seen = [], set()
    for t in roots:
        k = (tuple(t.shape), str(t.dtype)[6:], str(t.device), True)
        if k in keys and k not in seen:
            seen.add(k)
            out.append(t)
    return out


def _holders(frame: Any, tensors: list) -> dict:
    """Who keeps each tensor alive: a local or global variable of the user's code, directly or in a list,
    tuple or dict; with the line that stores into it."""
    out: dict = {}
    if not tensors:
        return out
    want = {id(t): t for t in tensors}
    for fr, ns in _user_scopes(frame):
        for name, val in list(ns.items()):
            found = []
            if id(val) in want:
                found = [(id(val), "")]
            elif isinstance(val, (list, tuple)) and len(val) < 100_000:
                found = [(id(x), "[]") for x in val if id(x) in want]
            elif isinstance(val, dict) and len(val) < 100_000:
                found = [(id(x), "{}") for x in val.values() if id(x) in want]
            for tid, how in found:
                if tid in out:
                    continue
                line = _store_line(fr.f_code.co_filename, name, fr.f_code) or fr.f_lineno
                t = want[tid]
                h = {"name": name + how, "file": fr.f_code.co_filename, "line": line, "func": fr.f_code.co_name}
                out[tid] = h
                out[("group", (tuple(t.shape), str(t.dtype)[6:], str(t.device), t.grad_fn is not None))] = h
    return out


_ast_cache: dict[str, Any] = {}


def _store_line(filename: str, name: str, code: Any) -> int | None:
    """The line in ``code``'s function that stores into ``name``: `name += ...`, `name.append(...)`,
    `name[...] = ...`, then a plain `name = ...`."""
    tree = _ast_cache.get(filename)
    if tree is None:
        try:
            with open(filename, encoding="utf-8") as f:
                tree = ast.parse(f.read())
        except Exception:
            tree = False
        _ast_cache[filename] = tree
    if not tree:
        return None
    lo, hi = code.co_firstlineno, max((ln for _s, _e, ln in code.co_lines() if ln), default=code.co_firstlineno)
    aug = app = sub = plain = None
    for node in ast.walk(tree):
        ln = getattr(node, "lineno", 0)
        if not (lo <= ln <= hi):
            continue
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            aug = aug or ln
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and isinstance(node.func.value, ast.Name) and node.func.value.id == name
              and node.func.attr in ("append", "extend", "insert", "update", "setdefault", "add")):
            app = app or ln
        elif isinstance(node, ast.Assign):
            for tg in node.targets:
                if isinstance(tg, ast.Subscript) and isinstance(tg.value, ast.Name) and tg.value.id == name:
                    sub = sub or ln
                elif isinstance(tg, ast.Name) and tg.id == name and plain is None:
                    plain = ln
    return aug or app or sub or plain


def install(probe: Any, census_every: int | None) -> Memory:
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    m = Memory(probe, census_every)
    probe.memory = m
    register_optimizer_step_post_hook(
        lambda _o, _a, _k: m.on_step("optimizer") if threading.get_ident() == probe.main_ident else None)
    _ = torch
    return m
