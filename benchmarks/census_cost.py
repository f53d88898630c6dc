"""What one memleak census costs, and where (issue 37): a small MLP whose 200 losses are kept with their
graphs (a leak), then ``census.census()`` timed in this process with thread CPU time, then the two steps
that dominate it timed alone (``gc.get_objects()`` and the filter that keeps the tensors) and a cProfile of one
more census. No ranks, no torchrun: the census is pure Python over this process's heap.

    python benchmarks/census_cost.py [--keep 200] [--censuses 3]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import sys
import time
from itertools import compress


def main() -> None:
    """Build the heap, time the censuses, print the table and the profile's top lines."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=int, default=200, help="losses kept with their graphs")
    ap.add_argument("--censuses", type=int, default=3)
    args = ap.parse_args()

    import torch

    from ddpdoctor.rank.probes.memleak import census as census_mod

    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    kept = []
    for _ in range(args.keep):
        loss = model(torch.randn(32, 64)).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        kept.append(loss)  # the leak the census must see
    growth, cache, frame = census_mod.Growth(), {}, sys._getframe()
    for i in range(args.censuses):
        t = time.thread_time()
        out = census_mod.census(frame, cache, growth)
        print(f"census {i + 1}: {1e3 * (time.thread_time() - t):.1f} ms, {out['objects']} objects")
    kinds = census_mod.tensor_types(torch)
    t0 = time.thread_time()
    objs = gc.get_objects()
    t1 = time.thread_time()
    a = [o for o in objs if type(o) in kinds]
    t2 = time.thread_time()
    b = list(compress(objs, map(kinds.__contains__, map(type, objs))))
    t3 = time.thread_time()
    assert len(a) == len(b)
    print(
        f"gc.get_objects(): {1e3 * (t1 - t0):.1f} ms; type filter (list comprehension): {1e3 * (t2 - t1):.1f} ms; "
        f"the same with itertools.compress: {1e3 * (t3 - t2):.1f} ms; {len(objs)} objects, {len(a)} tensors"
    )
    del objs, a, b
    prof = cProfile.Profile()
    prof.enable()
    census_mod.census(frame, cache, growth)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(6)


if __name__ == "__main__":
    main()
