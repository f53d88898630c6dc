"""Whole-run overhead of ddpdoctor's commands judged against an A/A control (issue 37): the comm-heavy loop
(benchmarks/comm_loop.py), 2 ranks, gloo, under bare torchrun twice ("bare" and "bare-again": two identical
arms, whose ratio is what the host's own noise makes of nothing) and under each command named.

    python benchmarks/arms.py --steps 3000 --reps 6 hang check memleak profile
    python benchmarks/arms.py --reps 8 profile --json out.json --markdown table.md
    python benchmarks/arms.py --reps 24 memleak profile --tree old=/path/to/older/checkout
    python benchmarks/arms.py --summarize out.json
    python benchmarks/arms.py --compile inductor --steps 1000 --reps 6 hang check memleak profile

Order: a cyclic Latin square. The arms' list is rotated by one each rep, so over ``len(arms)`` reps each arm
runs once in each position, and with three arms or more no arm runs twice in a row at a rep boundary (the
old reversed order ran the last arm of a rep first in the next: one slow phase of the host hit it twice).

Per arm, against the same rep's bare run: the in-loop speed (bare steps/s over the arm's: above 1 is
slower), and the ranks' CPU time per step (the arm's over bare's: above 1 costs more), each as the median
of the reps' own ratios with their range; then each figure less the A/A control's ("beyond A/A"), the goal
being within ``GOAL`` on both. The command arms also give the cost their reports state (``ddpdoctor's cost:``,
measured inside the ranks in thread CPU time): its median, per command.

``--tree NAME=PATH`` adds, for every command, an arm ``NAME:command`` that runs the ddpdoctor of another
checkout (``PYTHONPATH=PATH``, the same Python and torch): before/after figures from one session.
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
from typing import Any

LOOP = Path(__file__).resolve().parent / "comm_loop.py"
ARMS = ("hang", "check", "memleak", "profile", "bare-again")
GOAL = 0.03  # each command within this of the A/A control, on speed and on CPU time per step


def run_arm(
    arm: str, steps: int, tmp: str, trees: dict[str, str] | None = None, loop_args: tuple[str, ...] = ()
) -> tuple[float, float, dict[str, float] | None]:
    """One run of one arm: (the slower rank's steps/s, the ranks' mean CPU ms per step, the report's cost)."""
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
            *loop_args,
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
            *loop_args,
        ]
    # run from the temporary folder: `python -m` puts the working directory first on the ranks' sys.path, so
    # from a checkout its own ddpdoctor would shadow the --tree one's
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, cwd=tmp)
    text = r.stdout + r.stderr
    sps = [float(x) for x in re.findall(r"STEPS_PER_S ([\d.]+)", text)]
    cpu = [float(x) for x in re.findall(r"CPU_MS_PER_STEP ([\d.]+)", text)]
    if not sps:
        raise RuntimeError(f"{arm}: no STEPS_PER_S in its output:\n{text[-2000:]}")
    return min(sps), sum(cpu) / len(cpu) if cpu else float("nan"), own_cost(text)


COST_RE = re.compile(
    r"ddpdoctor's cost: ([\d.]+) µs/step on the training thread \(([\d.]+) % of a ([\d.]+) ms step\), "
    r"background ([\d.]+) µs/step(?: \(([\d.]+) %\))?(?:, monitor ([\d.]+) µs/step)?"
)


def own_cost(text: str) -> dict[str, float] | None:
    """The cost line of a ddpdoctor report (analysis/cost.py), as numbers; None for a bare run."""
    m = COST_RE.search(text)
    if not m:
        return None
    keys = ("train_us", "train_pct", "step_ms", "background_us", "background_pct", "monitor_us")
    return {k: float(v) for k, v in zip(keys, m.groups()) if v is not None}


def order(arms: list[str], rep: int) -> list[str]:
    """Rep ``rep``'s order: ``arms`` rotated by ``rep`` (a cyclic Latin square over ``len(arms)`` reps)."""
    k = rep % len(arms)
    return arms[k:] + arms[:k]


def main() -> int:
    """Run the reps (or summarize an earlier --json) and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("arms", nargs="*", help=f"any of: {', '.join(ARMS)} (bare-again is always run)")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--json", help="write the raw runs and the summary here")
    ap.add_argument("--markdown", help="write the table (docs/benchmarks.md's form) here")
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=PATH", help="another checkout's arms too")
    ap.add_argument("--compile", default="", metavar="BACKEND", help="the loop torch.compiled (inductor: issue 51)")
    ap.add_argument("--summarize", metavar="JSON", help="print the summary of an earlier --json file (runs nothing)")
    args = ap.parse_args()
    if args.summarize:
        raw = json.loads(Path(args.summarize).read_text())
        summary = summarize(list(raw["steps_per_s"]), raw["steps_per_s"], raw["cpu_ms_per_step"], raw.get("cost"))
        print(table(summary))
        return 0
    if not args.arms or any(a not in ARMS for a in args.arms):
        ap.error(f"name one or more arms of: {', '.join(ARMS)}")
    trees = dict(t.split("=", 1) for t in args.tree)
    cmds = [a for a in args.arms if a != "bare-again"]
    arms = ["bare", "bare-again", *cmds, *(f"{n}:{a}" for n in trees for a in cmds)]
    sps: dict[str, list[float]] = {a: [] for a in arms}
    cpu: dict[str, list[float]] = {a: [] for a in arms}
    cost: dict[str, list[dict[str, float] | None]] = {a: [] for a in arms}
    runs: list[str] = []
    summary: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="ddpd-arms-") as tmp:
        for i in range(args.reps):
            for arm in order(arms, i):
                s, c, own = run_arm(arm, args.steps, tmp, trees, ("--compile", args.compile) if args.compile else ())
                sps[arm].append(s)
                cpu[arm].append(c)
                cost[arm].append(own)
                runs.append(arm)
            print(f"rep {i + 1}: " + ", ".join(f"{a} {sps[a][-1]:.1f}" for a in order(arms, i)), flush=True)
            summary = summarize(arms, sps, cpu, cost)
            if args.json:  # after every rep: a session cut short keeps the reps it finished (--summarize)
                Path(args.json).write_text(
                    json.dumps(
                        {"steps_per_s": sps, "cpu_ms_per_step": cpu, "cost": cost, "order": runs, "summary": summary},
                        indent=1,
                    )
                )
    assert all(a != b for a, b in zip(runs, runs[1:])), "an arm ran twice in a row"
    text = table(summary)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return 0


def _paired(ref: list[float], arm: list[float], invert: bool) -> dict[str, Any]:
    """The median of the reps' own ratios and their range (bare/arm for speed, arm/bare for CPU time)."""
    rs = [(b / x if invert else x / b) for b, x in zip(ref, arm) if b == b and x == x and b > 0 and x > 0]
    if not rs:
        return {"median": float("nan"), "range": [float("nan"), float("nan")]}
    return {"median": statistics.median(rs), "range": [min(rs), max(rs)]}


def summarize(
    arms: list[str],
    sps: dict[str, list[float]],
    cpu: dict[str, list[float]],
    cost: dict[str, list[Any]] | None = None,
) -> dict[str, dict]:
    """Each arm's figures against the same reps' bare runs, and less the A/A control's (``bare-again``)."""
    summary: dict[str, dict] = {}
    for a in arms[1:]:
        speed, cpus = _paired(sps["bare"], sps[a], True), _paired(cpu["bare"], cpu[a], False)
        e: dict[str, Any] = {
            "steps_per_s": statistics.median(sps[a]),
            "speed": speed,
            "cpu": cpus,
            "reps": len(sps[a]),
        }
        own = [c for c in (cost or {}).get(a, []) if c]
        if own:
            e["own_cost"] = {k: statistics.median(c[k] for c in own if k in c) for k in own[0]}
        summary[a] = e
    aa = summary.get("bare-again")
    for a, e in summary.items():
        if aa is not None and a != "bare-again":
            e["speed_beyond_aa"] = e["speed"]["median"] - aa["speed"]["median"]
            e["cpu_beyond_aa"] = e["cpu"]["median"] - aa["cpu"]["median"]
            e["within_goal"] = abs(e["speed_beyond_aa"]) <= GOAL and abs(e["cpu_beyond_aa"]) <= GOAL
    summary["bare"] = {"steps_per_s": statistics.median(sps["bare"]), "reps": len(sps["bare"])}
    return summary


def table(summary: dict[str, dict]) -> str:
    """The Markdown table: per arm, speed and CPU per step against bare (median [range]), beyond the A/A
    control, and the cost its report stated."""
    rows = [
        "| arm | steps/s (median) | speed: bare / arm [range] | CPU per step: arm / bare [range] | beyond A/A "
        "(speed, CPU) | its report's cost (training thread, background) |",
        "|---|---|---|---|---|---|",
    ]
    bare = summary["bare"]
    rows.append(f"| bare | {bare['steps_per_s']:.1f} | 1 | 1 | | |")
    for a, e in summary.items():
        if a == "bare":
            continue
        sp, cp = e["speed"], e["cpu"]
        beyond = (
            f"{e['speed_beyond_aa']:+.3f}, {e['cpu_beyond_aa']:+.3f}{' (within 0.03)' if e['within_goal'] else ''}"
            if "speed_beyond_aa" in e
            else "(the control)"
        )
        own = e.get("own_cost")
        own_s = (
            f"{own['train_us']:.1f} µs/step ({own['train_pct']:.2f} % of {own['step_ms']:.2f} ms), "
            f"{own['background_us']:.1f} µs/step"
            if own
            else ""
        )
        rows.append(
            f"| {a} | {e['steps_per_s']:.1f} | {sp['median']:.3f} [{sp['range'][0]:.3f}-{sp['range'][1]:.3f}] | "
            f"{cp['median']:.3f} [{cp['range'][0]:.3f}-{cp['range'][1]:.3f}] | {beyond} | {own_s} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
