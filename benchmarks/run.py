"""ddpdoctor benchmarks: probe overhead vs bare torchrun, verdict latency, --help time.

    python benchmarks/run.py [--reps 5] [--steps 600] [--out benchmarks/results.json]

Every ratio compares runs made in this same invocation, alternating bare torchrun and ddpdoctor.
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
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY = sys.executable


def bare(script: Path, *args: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = subprocess.run(
        [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    return time.perf_counter() - t0, r.stdout + r.stderr


def doctor(script: Path, tmp: str, *args: str, extra: tuple[str, ...] = (), command: str = "hang") -> tuple[float, str]:
    t0 = time.perf_counter()
    r = subprocess.run(
        [
            PY,
            "-m",
            "ddpdoctor",
            command,
            "--nproc-per-node",
            "2",
            "--run-dir",
            tempfile.mkdtemp(dir=tmp),
            *extra,
            str(script),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    return time.perf_counter() - t0, r.stdout + r.stderr


def steps_per_s(text: str) -> float:
    m = re.findall(r"STEPS_PER_S ([\d.]+)", text)
    if not m:
        raise RuntimeError(text[-3000:])
    return min(float(x) for x in m)


def cpu_ms(text: str) -> float:
    """CPU time per step, averaged over the ranks: steadier than throughput on a busy 2-core machine."""
    m = re.findall(r"CPU_MS_PER_STEP ([\d.]+)", text)
    return sum(float(x) for x in m) / len(m) if m else float("nan")


def overhead(reps: int, steps: int, tmp: str, command: str = "hang") -> dict:
    """In-loop throughput of the comm-heavy loop under ``command`` against bare torchrun, alternating."""
    script = HERE / "comm_loop.py"
    rows = {"bare": [], "ddpdoctor": []}
    for i in range(reps):
        order = ("bare", "ddpdoctor") if i % 2 == 0 else ("ddpdoctor", "bare")
        for kind in order:
            wall, out = (
                bare(script, "--steps", str(steps))
                if kind == "bare"
                else doctor(script, tmp, "--steps", str(steps), command=command)
            )
            rows[kind].append({"wall_s": wall, "steps_per_s": steps_per_s(out), "cpu_ms_per_step": cpu_ms(out)})
            print(
                f"  {command if kind != 'bare' else 'bare'} pair {i + 1}: {rows[kind][-1]['steps_per_s']:.1f} steps/s, "
                f"{rows[kind][-1]['cpu_ms_per_step']:.3f} ms CPU/step",
                flush=True,
            )
    med = {
        k: {m: statistics.median(r[m] for r in v) for m in ("wall_s", "steps_per_s", "cpu_ms_per_step")}
        for k, v in rows.items()
    }
    # each pair's own ratio (its two runs are adjacent in time): a machine whose speed drifts over minutes
    # (a shared host) moves both runs of a pair alike, so the median of the pairs' ratios is steadier
    paired = [b["steps_per_s"] / d["steps_per_s"] for b, d in zip(rows["bare"], rows["ddpdoctor"])]
    return {
        "runs": rows,
        "median": med,
        "paired_ratios": paired,
        "paired_ratio": statistics.median(paired),
        "throughput_ratio": med["bare"]["steps_per_s"] / med["ddpdoctor"]["steps_per_s"],
        "cpu_ratio": med["ddpdoctor"]["cpu_ms_per_step"] / med["bare"]["cpu_ms_per_step"],
        "wall_ratio": med["ddpdoctor"]["wall_s"] / med["bare"]["wall_s"],
        "step_ms_bare": 1000 / med["bare"]["steps_per_s"],
    }


def _spread(ov: dict) -> str:
    return f"{min(ov['paired_ratios']):.3f}-{max(ov['paired_ratios']):.3f}"


def command_overhead(command: str, reps: int, tmp: str, extra: tuple[str, ...] = ()) -> dict:
    """Whole-process wall time of the healthy probe (longer than its default) under `command` vs bare."""
    script = HERE.parent / "probes" / "healthy.py"
    args = ("--epochs", "12", "--samples", "2048")
    rows = {"bare": [], command: []}
    for i in range(reps):
        order = ("bare", command) if i % 2 == 0 else (command, "bare")
        for kind in order:
            wall, _ = (
                bare(script, *args) if kind == "bare" else doctor(script, tmp, *args, extra=extra, command=command)
            )
            rows[kind].append(wall)
    med = {k: statistics.median(v) for k, v in rows.items()}
    return {"runs": rows, "median_wall_s": med, "wall_ratio": med[command] / med["bare"]}


def memleak_sensitivity(tmp: str, steps_list: tuple[int, ...] = (20, 30, 50)) -> dict:
    """Is one kept graph per step (probes/leak_graph.py, 20 ms steps) flagged after N steps, with the
    default census budget?"""
    out = {}
    for n in steps_list:
        _wall, text = doctor(
            HERE.parent / "probes" / "leak_graph.py", tmp, "--steps", str(n), "--step-ms", "20", command="memleak"
        )
        out[n] = "memleak.autograd-graph" in text
    return out


def false_positives(tmp: str, runs: int) -> dict:
    out = {}
    for probe, args in (("plateau.py", ()), ("healthy.py", ("--epochs", "8"))):
        hits = 0
        for _ in range(runs):
            _wall, text = doctor(HERE.parent / "probes" / probe, tmp, *args, command="memleak")
            hits += "memleak." in text
        out[probe] = {"runs": runs, "false_positives": hits}
    return out


def latency(mode: str, tmp: str, timeout: float) -> float:
    """Seconds from the last rank's ONSET line to ddpdoctor's verdict line on stderr."""
    cmd = [
        PY,
        "-m",
        "ddpdoctor",
        "hang",
        "--nproc-per-node",
        "2",
        "--timeout",
        str(timeout),
        "--run-dir",
        tempfile.mkdtemp(dir=tmp),
        str(HERE / "onset.py"),
        "--mode",
        mode,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    onsets, verdict_t = [], None
    assert proc.stdout is not None
    for line in proc.stdout:
        m = re.search(r"ONSET ([\d.]+)", line)
        if m:
            onsets.append(float(m.group(1)))
        if verdict_t is None and line.startswith("ddpdoctor: ") and "collecting stacks" in line:
            verdict_t = time.time()
    proc.wait(timeout=120)
    if verdict_t is None or not onsets:
        raise RuntimeError(f"no verdict/onset for {mode}")
    return verdict_t - max(onsets)


def help_time(reps: int = 10) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run([PY, "-m", "ddpdoctor", "--help"], capture_output=True, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--latency-reps", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results.json"))
    ap.add_argument(
        "--suite",
        default="all",
        help="all, or a comma list of: help,latency,overhead,inloop-check,inloop-memleak,inloop-profile,check,memleak,profile",
    )
    ap.add_argument("--fp-runs", type=int, default=10)
    args = ap.parse_args()
    want = (
        set(args.suite.split(","))
        if args.suite != "all"
        else {"help", "latency", "overhead", "check", "memleak", "profile"}
    )
    with tempfile.TemporaryDirectory() as tmp:
        res = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
        if "help" in want:
            res["help_s"] = help_time()
            print(f"ddpdoctor --help: {res['help_s']:.3f} s (median of 10)", flush=True)
        if "latency" in want:
            certain = [latency("certain", tmp, 60) for _ in range(args.latency_reps)]
            res["certain_latency_s"] = certain
            print(f"certain deadlock onset -> verdict: {', '.join(f'{x:.2f}' for x in certain)} s", flush=True)
            unc = [latency("uncertain", tmp, 5) for _ in range(args.latency_reps)]
            res["uncertain_latency_s"] = unc
            print(f"uncertain wait (--timeout 5) onset -> verdict: {', '.join(f'{x:.2f}' for x in unc)} s", flush=True)
        if "overhead" in want:
            ov = overhead(args.reps, args.steps, tmp)
            res["overhead"] = ov
            print(
                f"comm loop ({ov['step_ms_bare']:.2f} ms/step bare, {args.reps} alternating pairs): in-loop "
                f"throughput ratio bare/ddpdoctor {ov['throughput_ratio']:.3f} (median of the pairs' ratios "
                f"{ov['paired_ratio']:.3f}; pairs {_spread(ov)}), CPU per step ratio {ov['cpu_ratio']:.3f}, "
                f"whole-process wall ratio {ov['wall_ratio']:.3f}",
                flush=True,
            )
        for command in ("check", "memleak", "profile"):
            if f"inloop-{command}" not in want:
                continue
            ov = overhead(args.reps, args.steps, tmp, command)
            res[f"inloop_{command}"] = ov
            print(
                f"comm loop under {command} ({ov['step_ms_bare']:.2f} ms/step bare, {args.reps} pairs): in-loop "
                f"throughput ratio bare/ddpdoctor {ov['throughput_ratio']:.3f} (median of the pairs' ratios "
                f"{ov['paired_ratio']:.3f}; pairs {_spread(ov)}), CPU per step ratio {ov['cpu_ratio']:.3f}",
                flush=True,
            )
        for command in ("check", "memleak", "profile"):
            if command not in want:
                continue
            co = command_overhead(command, args.reps, tmp)
            res[f"{command}_overhead"] = co
            print(
                f"healthy probe, 12 epochs: wall ratio ddpdoctor {command}/bare {co['wall_ratio']:.3f} "
                f"(medians {co['median_wall_s']['bare']:.2f} s vs {co['median_wall_s'][command]:.2f} s)",
                flush=True,
            )
        if "memleak" in want:
            res["memleak_sensitivity"] = memleak_sensitivity(tmp)
            print(f"one kept graph per step flagged after N steps: {res['memleak_sensitivity']}", flush=True)
            res["memleak_false_positives"] = false_positives(tmp, args.fp_runs)
            print(f"memleak false positives: {res['memleak_false_positives']}", flush=True)
    Path(args.out).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
