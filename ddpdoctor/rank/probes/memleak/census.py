"""Census of a rank's memory: every live tensor (``gc.get_objects()``), grouped by shape, dtype, device and
whether it carries an autograd graph; the graph nodes reachable from all of them; who holds the biggest
graphs and a sample of each big group (``holders``). And the cheap scan of the graphs the user's own names
reach, made every few steps.
"""

from __future__ import annotations

import gc
import sys
from collections import defaultdict
from itertools import compress
from typing import Any

from ddpdoctor.rank.probes.memleak import holders as holders_mod
from ddpdoctor.rank.probes.memleak import referrers
from ddpdoctor.rank.probes.memleak.storesite import describe

GRAPH_NODE_CAP = 200_000
LOCAL_NODE_CAP = 50_000
TOP_GROUPS = 12
GROWN_GROUPS = 3  # the groups whose count rose most since the last census: their holders are searched
SEARCH_BUDGET = 0.05  # share of the time the referrer searches may take
FLOOR_SEARCHES = 3  # searches per grown group while its holder is unnamed, whatever SEARCH_BUDGET says
SAMPLES = 6  # old members of each such group whose referrers are followed up (the oldest are the kept ones)


class Growth:
    """What one rank's censuses remember between them: each group's count (to see which grew), the holders
    found from the growth upwards, and those holders as extra roots of the graph scan (weakly held: a root
    never keeps the user's object alive)."""

    def __init__(self) -> None:
        self.counts: dict[tuple, int] = {}
        self.grew_before: set[tuple] = set()  # the groups that grew at the last census
        self.holders: dict[tuple, dict] = {}  # group key -> described holder, from the referrers
        self.roots: dict[tuple, tuple] = {}  # holder key -> (owner ref, key, holder)
        self.searched: set[tuple] = set()  # groups whose holders were searched at least once
        self.search_cost = 0.0
        self.last_search_t = 0.0
        # the floor of holder searches (issue 37), counted in censuses: a grown group whose holder is not
        # named yet gets FLOOR_SEARCHES searches even when SEARCH_BUDGET would space them out
        self.tries: dict[tuple, int] = {}
        self.capped = 0  # searches cut short by referrers.TIME_CAP_S (the report says so)

    def search_due(self) -> bool:
        """A referrer search costs a few scans of the heap: at most ``SEARCH_BUDGET`` of the time between them."""
        import time

        return time.perf_counter() - self.last_search_t >= self.search_cost / SEARCH_BUDGET

    def add_root(self, holder: tuple, owner: Any) -> None:
        """Keep ``owner``'s slot as a root of the graph scan (``local_graphs``)."""
        import types
        import weakref

        if isinstance(owner, types.FrameType):
            return  # a frame's locals are reached from the stack already
        k = (holder[0], holder[1], id(holder[2][1]))
        if k in self.roots:
            return
        if isinstance(owner, dict):
            ref: Any = owner  # a module's globals: they live as long as the process
        else:
            try:
                ref = weakref.ref(owner)
            except TypeError:  # no weak references to this type: not kept as a root
                return
        self.roots[k] = (ref, holder[1], holder)
        while len(self.roots) > 16:
            self.roots.pop(next(iter(self.roots)))

    def extra_roots(self) -> list[tuple[str, Any, tuple, tuple]]:
        """The registered holders' current values, as ``holders.roots`` gives its roots."""
        out = []
        for ref, key, holder in list(self.roots.values()):
            try:
                v = referrers.resolve(ref, key)
            except Exception:  # an owner whose attribute cannot be read now: skipped this time
                continue
            if v is not None:
                base = holder[0].split("[]", 1)[0]
                out.append((base, v, (base, holder[1], holder[2]), holder[2]))
        return out


def group_name(k: tuple) -> str:
    """A group's key as the records write it: ``[shape]|dtype|device|has-graph``."""
    return f"{list(k[0])}|{k[1]}|{k[2]}|{k[3]}"


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


def local_graphs(frame: Any, cache: dict, growth: Growth | None = None) -> tuple[int, int, dict | None]:
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
    extra = growth.extra_roots() if growth is not None else []
    holders_mod.walk(frame, on_tensor, kinds, skip=skip, max_visits=20_000, extra=extra)
    best = None
    if per:
        n, h = max(per.values(), key=lambda e: e[0])
        best = dict(describe(h, frame, cache), nodes=n)
    return len(seen), roots[0], best


def census(frame: Any, cache: dict, growth: Growth | None = None) -> dict[str, Any]:
    """Every live tensor, grouped; graph nodes; holders of the biggest graphs and of each top group; and,
    for the groups that grew since the last census, the holder found from their old members upwards."""
    torch = sys.modules["torch"]
    kinds = tensor_types(torch)
    objs = gc.get_objects()
    n_objs = len(objs)
    # type() instead of isinstance(): no __class__ lookups (some torch objects warn on them); the filter runs in
    # C (compress over map): a third less than a comprehension over the ~300,000 objects of a torch process
    tensors = list(compress(objs, map(kinds.__contains__, map(type, objs))))
    del objs
    groups: dict[tuple, list] = defaultdict(lambda: [0, 0, None])
    graph_roots = []
    keys: list[tuple | None] = []
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
            keys.append(key)
        except Exception:  # a tensor subclass that refuses shape/dtype: not grouped
            keys.append(None)
    seen: set[int] = set()
    biggest = [(t, walk_graph(t.grad_fn, seen, GRAPH_NODE_CAP)) for t in graph_roots]
    biggest.sort(key=lambda x: -x[1])
    del graph_roots
    top = sorted(groups.items(), key=lambda kv: -kv[1][1])[:TOP_GROUPS]
    in_top = {k for k, _v in top}
    top += sorted((kv for kv in groups.items() if kv[0] not in in_top), key=lambda kv: -kv[1][0])[: TOP_GROUPS // 2]
    in_top = {k for k, _v in top}
    top += [kv for kv in groups.items() if kv[0][3] and kv[0] not in in_top][:TOP_GROUPS]
    grown: list[tuple[tuple, int]] = []
    if growth is not None:
        prev = growth.counts
        if prev:
            grown = sorted(
                ((k, v[0] - prev.get(k, 0)) for k, v in groups.items() if v[0] - prev.get(k, 0) >= 2),
                key=lambda kv: -kv[1],
            )[:GROWN_GROUPS]
        growth.counts = {k: v[0] for k, v in groups.items()}
        # a group that grew at this census and at the one before: warm-up (optimizer state, caches that
        # fill once) grows once; only what keeps growing is worth a search for its holder
        again = [kv for kv in grown if kv[0] in growth.grew_before]
        growth.grew_before = {k for k, _n in grown}
        grown = again
        in_top = {k for k, _v in top}
        top += [(k, groups[k]) for k, _n in grown if k not in in_top]
    # old members of the grown groups: gc lists the young generation first, so the tail holds the tensors
    # that survived many collections (what a leak keeps), the head this step's temporaries
    samples: dict[tuple, list] = {k: [] for k, _n in grown}
    if samples:
        for o, key in zip(reversed(tensors), reversed(keys)):
            got = samples.get(key) if key is not None else None
            if got is not None and len(got) < SAMPLES:
                got.append(o)
    del tensors, keys
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
            group_holders[group_name(k)] = h
    out = {
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
    # our own references to the tensors go before the referrers are searched (they would be found first)
    del groups, top, biggest
    targets.clear()
    found.clear()
    if samples and growth is not None:
        out["grown"] = _grown_holders(samples, dict(grown), growth, frame, cache)
    return out


def _grown_holders(
    samples: dict[tuple, list], added: dict[tuple, int], growth: Growth, frame: Any, cache: dict
) -> list:
    """The holder of each grown group, by the votes of its old members' referrers (``referrers.find``)."""
    import time

    found: dict[int, tuple] = {}
    unnamed = [k for k in samples if k not in growth.holders and growth.tries.get(k, 0) < FLOOR_SEARCHES]
    searched, capped = False, False
    if unnamed or any(k not in growth.searched for k in samples) or growth.search_due():
        growth.searched.update(samples)
        for k in samples:
            growth.tries[k] = growth.tries.get(k, 0) + 1
        flat = [t for ts in samples.values() for t in ts]
        # the cost in the training thread's CPU time, not the wall clock: on a busy host the wall time of
        # the same search is many times longer, and a wall-clock budget would then space the searches out
        # until the holder is never named (issue 37: only memleak.rss under a CPU hog)
        t0 = time.thread_time()
        stats: dict[str, Any] = {}
        found = referrers.find(flat, keep_out={id(samples), id(flat), *(id(v) for v in samples.values())}, stats=stats)
        growth.search_cost, growth.last_search_t = time.thread_time() - t0, time.perf_counter()
        searched, capped = True, bool(stats.get("capped"))
        growth.capped += capped
    out = []
    for k, ts in samples.items():
        votes: dict[tuple, list] = {}
        for t in ts:
            got = found.get(id(t))
            if got is not None:
                h, owner = got
                e = votes.setdefault((h[0], h[1], id(h[2][1])), [0, h, owner])
                e[0] += 1
        entry: dict[str, Any] = {"group": group_name(k), "added": added.get(k, 0), "sampled": len(ts)}
        if votes:
            n, h, owner = max(votes.values(), key=lambda e: e[0])
            desc = describe(h, frame, cache)
            growth.holders[k] = desc
            growth.add_root(h, owner)
            entry.update(holder=desc, votes=n)
        elif k in growth.holders:
            entry.update(holder=growth.holders[k], votes=0)
        else:
            # no holder for this group: say why (the report names the cause, not a weaker finding)
            entry["search"] = "capped" if capped else "ran" if searched else "skipped"
        out.append(entry)
    return out
