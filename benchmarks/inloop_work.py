"""What the probes did inside the timed loop of a ``benchmarks/comm_loop.py`` run (the steps after its 50 warm-up
ones), read from the run folders: memleak's censuses (with their CPU), graph scans and memory lines there, and
the cost sites of rank 0's last heartbeat (thread CPU per call, sampled: ``rank/cost.py``). Counts, not timings
against bare: they hold on a shared host, where the arms' ratios do not.

    ddpdoctor memleak --nproc-per-node 2 --run-dir /tmp/il-memleak benchmarks/comm_loop.py --steps 3000
    python benchmarks/inloop_work.py /tmp/il-memleak [more run folders]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

WARMUP = 50  # comm_loop.py's default warm-up steps


def _records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def describe(run: Path, rank: int = 0) -> str:
    """One run folder's in-loop work, in a few lines."""
    out = [str(run)]
    recs = _records(run / "ranks" / str(rank) / "memory.jsonl")
    if recs:
        cen = [e for e in recs if e["kind"] == "census" and e["step"] > WARMUP and not e.get("final")]
        lines = [e for e in recs if e["kind"] == "mem" and e["step"] > WARMUP]
        scans = [e for e in lines if "local_graph" in e]
        ov = next((e for e in recs if e["kind"] == "mem_overhead"), {})
        out.append(
            f"in-loop censuses {len(cen)} ({sum(e['cost_s'] for e in cen) * 1e3:.0f} ms: "
            + ", ".join(f"step {e['step']} {e['why']}" for e in cen)
            + f"), scans {len(scans)}, memory lines {len(lines)}; exact CPU of the whole run {ov.get('overhead_s')} s"
        )
    beats = [e for e in _records(run / "ranks" / str(rank) / "heartbeat.jsonl") if e.get("cost")]
    if beats:
        c = beats[-1]["cost"]
        sites = {k: round(v[2] / v[1], 1) for k, v in c["sites"].items() if v[1]}
        out.append(f"sites (µs a call): {sites}; exact {c['exact_us']} µs")
    return "\n   ".join(out)


def main() -> int:
    """Print each run folder's in-loop work."""
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    for arg in sys.argv[1:]:
        print(describe(Path(arg)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
