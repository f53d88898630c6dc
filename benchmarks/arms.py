"""Whole-run pairs of several arms in one session: bare torchrun and any ddpdoctor commands, each rep runs
every arm once (the order reversed every other rep), each arm's ratio is taken against the same rep's bare
run. The comm-heavy loop (benchmarks/comm_loop.py), 2 ranks, gloo.

    python benchmarks/arms.py --steps 3000 --reps 10 hang check memleak profile
    python benchmarks/arms.py --reps 8 profile --json out.json
    python benchmarks/arms.py --reps 24 memleak profile --tree old=/path/to/older/checkout
    python benchmarks/arms.py --reps 24 memleak profile bare-again --json out.json
    python benchmarks/arms.py --summarize out.json

``--tree NAME=PATH`` adds, for every command, an arm ``NAME:command`` that runs the ddpdoctor of another
checkout (``PYTHONPATH=PATH``, the same Python and torch): before/after figures from one session.
``bare-again`` is a second bare torchrun arm (an A/A control): its "ratio" is what the host's own noise
makes of two identical arms, the protocol's resolution that session; with it, every other arm is also
compared with both bare runs of its rep.

Prints per arm: median steps/s, the ratio of the medians (bare/arm), the median of the reps' own ratios
with their range, and the median of the reps' CPU-time-per-step ratios (arm/bare).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

LOOP = Path(__file__).resolve().parent / "comm_loop.py"
ARMS = ("hang", "check", "memleak", "profile", "bare-again")


def run_arm(arm: str, steps: int, tmp: str, trees: dict[str, str] | None = None) -> tuple[float, float]:
    env = None
    if ":" in arm:  # another checkout's ddpdoctor
        name, arm = arm.split(":", 1)
        env = dict(os.environ, PYTHONPATH=(trees or {})[name])
    if arm in ("bare", "bare-again"):
        argv = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(LOOP),
            "--steps",
            str(steps),
        ]
    else:
        argv = [
            sys.executable,
            "-m",
            "ddpdoctor",
            arm,
            "--nproc-per-node",
            "2",
            "--run-dir",
            tempfile.mkdtemp(dir=tmp),
            str(LOOP),
            "--steps",
            str(steps),
        ]
    # run from the temporary folder: `python -m` puts the working directory first on the ranks' sys.path, so
    # from a checkout its own ddpdoctor would shadow the --tree one's
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, cwd=tmp)
    text = r.stdout + r.stderr
    sps = [float(x) for x in re.findall(r"STEPS_PER_S ([\d.]+)", text)]
    cpu = [float(x) for x in re.findall(r"CPU_MS_PER_STEP ([\d.]+)", text)]
    if not sps:
        raise RuntimeError(f"{arm}: no STEPS_PER_S in its output:\n{text[-2000:]}")
    return min(sps), sum(cpu) / len(cpu) if cpu else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("arms", nargs="*", help=f"any of: {', '.join(ARMS)}")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--json", help="write the raw runs and the summary here")
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=PATH", help="another checkout's arms too")
    ap.add_argument("--summarize", metavar="JSON", help="print the summary of an earlier --json file (runs nothing)")
    args = ap.parse_args()
    if args.summarize:
        raw = json.loads(Path(args.summarize).read_text())
        summarize(list(raw["steps_per_s"]), raw["steps_per_s"], raw["cpu_ms_per_step"])
        return 0
    if not args.arms or any(a not in ARMS for a in args.arms):
        ap.error(f"name one or more arms of: {', '.join(ARMS)}")
    trees = dict(t.split("=", 1) for t in args.tree)
    arms = ["bare", *args.arms, *(f"{n}:{a}" for n in trees for a in args.arms)]
    sps: dict[str, list[float]] = {a: [] for a in arms}
    cpu: dict[str, list[float]] = {a: [] for a in arms}
    with tempfile.TemporaryDirectory(prefix="ddpd-arms-") as tmp:
        for i in range(args.reps):
            for arm in arms if i % 2 == 0 else arms[::-1]:
                s, c = run_arm(arm, args.steps, tmp, trees)
                sps[arm].append(s)
                cpu[arm].append(c)
            print(f"rep {i + 1}: " + ", ".join(f"{a} {sps[a][-1]:.1f}" for a in arms), flush=True)
    summary = summarize(arms, sps, cpu)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"steps_per_s": sps, "cpu_ms_per_step": cpu, "summary": summary}, indent=1)
        )
    return 0


def summarize(arms: list[str], sps: dict[str, list[float]], cpu: dict[str, list[float]]) -> dict[str, dict]:
    """Print and return each arm's figures against the same reps' bare runs (``arms[0]`` is "bare")."""
    summary: dict[str, dict] = {}
    for a in arms[1:]:
        pairs = [b / x for b, x in zip(sps["bare"], sps[a])]
        cpus = [x / b for b, x in zip(cpu["bare"], cpu[a])]
        summary[a] = {
            "throughput_ratio": statistics.median(sps["bare"]) / statistics.median(sps[a]),
            "paired_median": statistics.median(pairs),
            "paired_range": [min(pairs), max(pairs)],
            "cpu_paired_median": statistics.median(cpus),
        }
        print(
            f"{a:>8}: median {statistics.median(sps[a]):.1f} steps/s (bare {statistics.median(sps['bare']):.1f}); "
            f"ratio {summary[a]['throughput_ratio']:.3f}; reps' ratios median {summary[a]['paired_median']:.3f} "
            f"[{min(pairs):.3f}-{max(pairs):.3f}]; CPU per step {summary[a]['cpu_paired_median']:.3f}",
            flush=True,
        )
    if "bare-again" in sps:
        # with two bare runs in every rep, each rep's reference is both (their geometric mean): a single
        # bare run is as noisy as the arm it is compared with, and the A/A line above says how noisy
        both = [(b * b2) ** 0.5 for b, b2 in zip(sps["bare"], sps["bare-again"])]
        for a in arms[1:]:
            if a == "bare-again":
                continue
            pairs = [r / x for r, x in zip(both, sps[a])]
            summary[a]["both_bares_ratio"] = statistics.median(both) / statistics.median(sps[a])
            summary[a]["both_bares_paired_median"] = statistics.median(pairs)
            print(
                f"{a:>8}: against both bare runs: ratio {summary[a]['both_bares_ratio']:.3f}; reps' ratios median "
                f"{summary[a]['both_bares_paired_median']:.3f} [{min(pairs):.3f}-{max(pairs):.3f}]",
                flush=True,
            )
    return summary


if __name__ == "__main__":
    sys.exit(main())
