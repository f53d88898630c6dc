"""What a Python-level collective costs the calling thread beside torch's own flight recorder (issue 54):
thread CPU per ``dist.all_reduce`` of one float (benchmarks/collective_cost.py), 2 ranks, gloo, in arms:

- ``off``: bare torchrun with the recorder switched off (``TORCH_FR_BUFFER_SIZE=0``);
- ``on`` and ``on-again``: bare torchrun with torch's default recorder, twice (the A/A pair: what the host's
  own noise makes of nothing);
- one arm per ddpdoctor command named (``hang``, ``check``, ``memleak``, ``profile``), the recorder on (since
  stop 59 the ops torch's recorder records leave the wrappers by default: docs/how-it-works.md);
  ``COMMAND:MODE`` runs it with ``DDPDOCTOR_COLLECTIVES=MODE`` (``hang:wrappers``: the wrappers on every op, the
  default before stop 59).

    python benchmarks/recorder_cost.py --reps 5 hang check memleak profile
    python benchmarks/recorder_cost.py --reps 7 hang hang:wrappers
    python benchmarks/recorder_cost.py --reps 5 --calls 5000 hang --json out.json

Order: the arms' list rotated by one each rep (a cyclic Latin square). Per arm: the median over the reps of
its thread CPU per call, the median of its difference to the same rep's ``on`` arm, and the A/A pair's
spread (the largest |on-again - on| over the reps): the resolution of this host. The goal of issue 54 is
``hang`` within max(2 us, that spread) of ``on``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
JOB = HERE / "collective_cost.py"
BASE = ("off", "on", "on-again")


def _run(arm: str, calls: int, tmp: str) -> float:
    env = dict(os.environ)
    env.pop("TORCH_FR_BUFFER_SIZE", None)
    if arm == "off":
        env["TORCH_FR_BUFFER_SIZE"] = "0"
    job = [str(JOB), "--calls", str(calls)]
    if arm in BASE:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *job]
    else:
        command, _, mode = arm.partition(":")
        if mode:
            env["DDPDOCTOR_COLLECTIVES"] = mode
        run_dir = tempfile.mkdtemp(prefix=f"{command}-", dir=tmp)
        cmd = [sys.executable, "-m", "ddpdoctor", command, "--run-dir", run_dir, "--nproc-per-node", "2", *job]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=tmp)
    for line in p.stdout.splitlines():
        at = line.find("{")  # torchrun's prefix ("[default0]:") where --tee or the tool's capture adds one
        if at >= 0 and "thread_cpu_us_per_call" in line:
            return float(json.loads(line[at:])["thread_cpu_us_per_call"])
    raise SystemExit(f"{arm}: no figure in its output (exit {p.returncode})\n{p.stderr[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("commands", nargs="*", default=["hang"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()
    arms = [*BASE, *args.commands]
    got: dict[str, list[float]] = {a: [] for a in arms}
    with tempfile.TemporaryDirectory(prefix="recorder-cost-") as tmp:
        for rep in range(args.reps):
            k = rep % len(arms)
            for arm in arms[k:] + arms[:k]:
                got[arm].append(_run(arm, args.calls, tmp))
            print(f"rep {rep + 1}: " + ", ".join(f"{a} {got[a][-1]:.1f}" for a in arms), file=sys.stderr)
    on = got["on"]
    spread = max(abs(a - b) for a, b in zip(got["on-again"], on))
    rows = {}
    for arm in arms:
        diffs = [x - o for x, o in zip(got[arm], on)]
        rows[arm] = {
            "us_per_call": round(statistics.median(got[arm]), 2),
            "minus_on_us": round(statistics.median(diffs), 2),
            "range": [round(min(got[arm]), 2), round(max(got[arm]), 2)],
        }
    out = {"calls": args.calls, "reps": args.reps, "aa_spread_us": round(spread, 2), "arms": rows}
    print("| arm | thread CPU per all_reduce (median, us) | minus `on` (median of the reps' differences) | range |")
    print("|---|---|---|---|")
    for arm, r in rows.items():
        print(f"| {arm} | {r['us_per_call']} | {r['minus_on_us']:+} | {r['range'][0]}-{r['range'][1]} |")
    print(f"A/A spread (max |on-again - on|): {out['aa_spread_us']} us; goal for hang: within max(2, spread)")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
