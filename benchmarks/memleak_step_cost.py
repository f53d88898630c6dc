"""What memleak's per-step hook costs the training thread, call by call (issue 51, point 5): the probe's
``Memory.after_step`` at the end of every step of a small training loop (forward, backward, SGD step, then a
busy wait standing for the all-reduce's, ~3.5 ms a step like ``comm_loop.py``), its thread CPU time by what the
call did: ``plain`` (nothing due), ``line`` (a memory line), ``scan`` (a graph scan), ``census``. The cache is
as cold as in a rank (the step's own work runs between two calls), which a tight loop of calls would hide.

``--other TREE`` runs a second tree's sampler (``TREE/ddpdoctor/rank/probes/memleak/sampler.py``, e.g. main's
checkout) in the same process, both called at every step in alternating order: the two see the same host.

    python benchmarks/memleak_step_cost.py --steps 3000 --other /path/to/main
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

WARM = 64  # the probe's early steps (a line at each) are left out


class _Probe:
    """The attributes of a rank's probe that the memory probe reads (a run folder of its own)."""

    def __init__(self) -> None:
        from ddpdoctor.rank.cost import Cost

        self.dir = self.run_dir = tempfile.mkdtemp(prefix="ddpdoctor-stepcost-")
        self.rank = 0
        self.cost = Cost()
        self.main_ident = threading.get_ident()


def _sampler(tree: str | None) -> Any:
    if tree is None:
        from ddpdoctor.rank.probes.memleak import sampler

        return sampler
    path = Path(tree) / "ddpdoctor" / "rank" / "probes" / "memleak" / "sampler.py"
    spec = importlib.util.spec_from_file_location(f"sampler_{len(tree)}", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"no sampler at {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def measure(steps: int, wait_s: float, other: str | None) -> dict[str, dict[str, list[int]]]:
    """Per probe (``this``, ``other``): kind -> [calls, thread CPU ns, of it the scans' and censuses' own]."""
    import torch

    mems = {"this": _sampler(None).Memory(_Probe(), None, None)}
    if other:
        mems["other"] = _sampler(other).Memory(_Probe(), None, None)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    x = torch.randn(32, 256)
    acc: dict[str, dict[str, list[int]]] = {k: {} for k in mems}
    names = list(mems)
    for i in range(steps):
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < wait_s:
            pass
        for k in names if i % 2 == 0 else names[::-1]:
            m = mems[k]
            ls, sc, ce, ov = m.last_sample_t, m.last_scan_step, m.censuses, m.overhead
            c0 = time.thread_time_ns()
            m.on_step()
            dt = time.thread_time_ns() - c0
            if m.step <= WARM:
                continue
            kind = (
                "census"
                if m.censuses != ce
                else "scan"
                if m.last_scan_step != sc
                else "line"
                if m.last_sample_t != ls
                else "plain"
            )
            a = acc[k].setdefault(kind, [0, 0, 0])
            a[0] += 1
            a[1] += dt
            a[2] += int((m.overhead - ov) * 1e9)
    return acc


def main() -> int:
    """Print each probe's thread CPU per step and per kind of call."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--wait-ms", type=float, default=2.0, help="busy wait after each step's own work")
    ap.add_argument("--other", metavar="TREE", help="a second checkout whose sampler runs beside this one")
    args = ap.parse_args()
    acc = measure(args.steps, args.wait_ms / 1e3, args.other)
    n = max(1, args.steps - WARM)
    for k, a in acc.items():
        tot = sum(v[1] for v in a.values())
        own = sum(v[2] for v in a.values())
        kinds = ", ".join(f"{kk} {v[0]}x {v[1] / v[0] / 1e3:.1f} µs" for kk, v in sorted(a.items()))
        print(
            f"{k}: {tot / n / 1e3:.1f} µs/step ({tot / 1e6:.1f} ms, scans' and censuses' own {own / 1e6:.1f} ms): {kinds}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
