"""Census of a rank's memory: every live tensor (``gc.get_objects()``), grouped by shape, dtype, device and
whether it carries an autograd graph; the graph nodes reachable from all of them; who holds the biggest
graphs and a sample of each big group (``holders``). And the cheap scan of the graphs the user's own names
reach, made every few steps.
"""

from __future__ import annotations

import gc
import sys
from collections import defaultdict
from typing import Any

from ddpdoctor.rank.probes.memleak import holders as holders_mod
from ddpdoctor.rank.probes.memleak.storesite import describe

GRAPH_NODE_CAP = 200_000
LOCAL_NODE_CAP = 50_000
TOP_GROUPS = 12


def tensor_types(torch: Any) -> set:
    kinds = {torch.Tensor, torch.nn.Parameter}
    try:
        kinds.add(torch.nn.parameter.Buffer)
    except AttributeError:
        pass
    return kinds


def walk_graph(fn: Any, seen: set[int], cap: int) -> int:
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
        except Exception:  # a node freed under us, or a custom node without next_functions: a leaf here
            pass
    return len(seen) - before


def _group_key(t: Any) -> tuple:
    return (tuple(t.shape), str(t.dtype)[6:], str(t.device), t.grad_fn is not None)


def local_graphs(frame: Any, cache: dict) -> tuple[int, int, dict | None]:
    """Autograd nodes reachable from what the user's code can name (locals, globals, attributes of user
    objects, containers, closures): (nodes, tensors with a graph, the holder of the most nodes)."""
    torch = sys.modules["torch"]
    kinds = tensor_types(torch)
    seen: set[int] = set()
    per: dict[tuple, list] = {}
    roots = [0]

    def on_tensor(t: Any, holder: Any, _path: str) -> None:
        gf = t.grad_fn
        if gf is None:
            return
        roots[0] += 1
        n = walk_graph(gf, seen, LOCAL_NODE_CAP)
        if holder is not None and n:
            k = (holder[0], holder[1], id(holder[2][1]))
            e = per.get(k)
            if e is None:
                per[k] = [n, holder]
            else:
                e[0] += n

    skip = (torch.utils.data.Dataset, torch.utils.data.DataLoader, torch.optim.Optimizer)
    holders_mod.walk(frame, on_tensor, kinds, skip=skip, max_visits=20_000)
    best = None
    if per:
        n, h = max(per.values(), key=lambda e: e[0])
        best = dict(describe(h, frame, cache), nodes=n)
    return len(seen), roots[0], best


def census(frame: Any, cache: dict) -> dict[str, Any]:
    """Every live tensor, grouped; graph nodes; holders of the biggest graphs and of each top group."""
    torch = sys.modules["torch"]
    kinds = tensor_types(torch)
    objs = gc.get_objects()
    n_objs = len(objs)
    # type() instead of isinstance(): no __class__ lookups (some torch objects warn on them), and fast
    tensors = [o for o in objs if type(o) in kinds]
    del objs
    groups: dict[tuple, list] = defaultdict(lambda: [0, 0, None])
    graph_roots = []
    for o in tensors:
        try:
            nbytes = o.numel() * o.element_size() if o.layout == torch.strided else 0
            key = _group_key(o)
            g = groups[key]
            g[0] += 1
            g[1] += nbytes
            if g[2] is None:
                g[2] = o
            if key[3]:
                graph_roots.append(o)
        except Exception:
            continue
    del tensors
    seen: set[int] = set()
    biggest = [(t, walk_graph(t.grad_fn, seen, GRAPH_NODE_CAP)) for t in graph_roots]
    biggest.sort(key=lambda x: -x[1])
    del graph_roots
    top = sorted(groups.items(), key=lambda kv: -kv[1][1])[:TOP_GROUPS]
    in_top = {k for k, _v in top}
    top += sorted((kv for kv in groups.items() if kv[0] not in in_top), key=lambda kv: -kv[1][0])[: TOP_GROUPS // 2]
    in_top = {k for k, _v in top}
    top += [kv for kv in groups.items() if kv[0][3] and kv[0] not in in_top][:TOP_GROUPS]
    by_dev: dict[str, int] = defaultdict(int)
    for (_shape, _dtype, dev, _g), (_cnt, nb, _s) in groups.items():
        by_dev[dev] += nb
    targets = {id(t): t for t, _n in biggest[:3]}
    targets.update({id(v[2]): v[2] for _k, v in top if v[2] is not None})
    found: dict[int, Any] = {}

    def on_tensor(t: Any, holder: Any, _path: str) -> None:
        if id(t) in targets and id(t) not in found and holder is not None:
            found[id(t)] = holder

    holders_mod.walk(frame, on_tensor, kinds, max_visits=60_000)

    def named(t: Any) -> dict | None:
        h = found.get(id(t))
        return describe(h, frame, cache) if h is not None else None

    group_holders = {}
    for k, v in top:
        h = named(v[2]) if v[2] is not None else None
        if h:
            group_holders[f"{list(k[0])}|{k[1]}|{k[2]}|{k[3]}"] = h
    return {
        "objects": n_objs,
        "tensor_bytes": dict(by_dev),
        "tensors": sum(v[0] for v in groups.values()),
        "graph_nodes": len(seen),
        "groups": [
            {"shape": list(k[0]), "dtype": k[1], "device": k[2], "grad_fn": k[3], "count": v[0], "bytes": v[1]}
            for k, v in top
        ],
        "biggest_graphs": [{"nodes": n, "shape": list(t.shape), "holder": named(t)} for t, n in biggest[:3]],
        "group_holders": group_holders,
    }
