"""Soak: run benchmarks/soak_loop.py under ``ddpdoctor hang`` for a while and report what the run directory
and the monitor cost: bytes per rank on disk (sampled every few seconds: the peak and the end), the
ledger and heartbeat lines kept, and the monitor's RSS at start and end.

    python benchmarks/soak.py --seconds 120
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))


def rank_bytes(run_dir: str) -> dict[str, int]:
    out = {}
    ranks = os.path.join(run_dir, "ranks")
    for r in sorted(os.listdir(ranks)) if os.path.isdir(ranks) else []:
        d = os.path.join(ranks, r)
        out[r] = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--run-dir", default=None)
    a = ap.parse_args()
    run_dir = a.run_dir or os.path.join(tempfile.mkdtemp(prefix="ddpdoctor-soak-"), "run")
    cmd = [
        sys.executable,
        "-m",
        "ddpdoctor",
        "hang",
        "--run-dir",
        run_dir,
        os.path.join(HERE, "soak_loop.py"),
        "--seconds",
        str(a.seconds),
    ]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    mon = psutil.Process(p.pid)
    rss = []
    peak: dict[str, int] = {}
    t0 = time.time()
    try:
        while p.poll() is None and time.time() - t0 < a.seconds + 120:
            time.sleep(2.0)
            try:
                b = mon.memory_info().rss
                if b:
                    rss.append((round(time.time() - t0, 1), b))
            except psutil.Error:
                pass
            for r, b in rank_bytes(run_dir).items():
                peak[r] = max(peak.get(r, 0), b)
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)
    end = rank_bytes(run_dir)
    steps = [line for line in out.splitlines() if "STEPS" in line]

    def lines(r: str, name: str) -> int:
        n = 0
        for f in (name + ".jsonl", name + ".prev.jsonl"):
            try:
                with open(os.path.join(run_dir, "ranks", r, f), "rb") as fh:
                    n += sum(1 for _ in fh)
            except OSError:
                pass
        return n

    res = {
        "seconds": a.seconds,
        "rc": p.returncode,
        "steps": steps,
        "run_dir": run_dir,
        "rank_bytes_end": end,
        "rank_bytes_peak": peak,
        "ledger_lines_kept": {r: lines(r, "ledger") for r in end},
        "hb_lines_kept": {r: lines(r, "heartbeat") for r in end},
        "monitor_rss_mb_first": round(rss[0][1] / 2**20, 1) if rss else None,
        "monitor_rss_mb_last": round(rss[-1][1] / 2**20, 1) if rss else None,
        "monitor_rss_mb_max": round(max(b for _t, b in rss) / 2**20, 1) if rss else None,
        "monitor_rss_mb_every_10s": [(t, round(b / 2**20, 1)) for t, b in rss[::5]],
        "verdict_line": [line for line in out.splitlines() if line.startswith("ddpdoctor hang:")],
        "load": os.getloadavg(),
    }
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
