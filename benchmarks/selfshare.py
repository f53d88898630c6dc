"""Where a probe's cost goes, by a profiler (issue 10): the share of a rank's on-CPU time spent in
ddpdoctor's own Python frames while the communication-heavy loop (benchmarks/comm_loop.py) runs under a
command.

    python benchmarks/selfshare.py                       # hang, check, memleak, profile; 2 ranks
    python benchmarks/selfshare.py --command hang --seconds 20 --rate 400

For each command: start ``ddpdoctor <command> benchmarks/comm_loop.py``, wait until rank 0 has
initialised plus ``--settle`` seconds, record rank 0 with ``py-spy record --nonblocking --format raw``
(idle samples are left out by py-spy: what remains is on-CPU time, all threads), then end the run (its
process group, started here). A sample counts as ddpdoctor's when its innermost Python frame is in the
``ddpdoctor`` package (the wrappers' own lines, the ledger writes, the heartbeat thread); a call a
wrapper makes into torch (the user's collective itself) counts as the user's. Indirect costs (caches a
wrapper evicts, GIL hand-offs) are not in this figure; the whole-run ratios of ``run.py`` hold them, with
this host's noise.

The cross-check (issue 37): the same window as ddpdoctor measures itself inside rank 0 (``rank/cost.py``:
its training thread's sampled wrappers, exact scans and censuses, and its heartbeat thread, in thread CPU
time), from rank 0's heartbeats just before and just after the recording, over rank 0's CPU time in the
window (the heartbeat's ``cpu``): ``self_pct`` beside py-spy's ``share_pct``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOOP = ROOT / "benchmarks" / "comm_loop.py"
_NOT_PROBE = ("bootstrap.py", "__main__.py")


def _ours(frame: str) -> bool:
    return "(ddpdoctor/" in frame and not any(n in frame for n in _NOT_PROBE)


def share(raw: str) -> tuple[int, Counter]:
    """(on-CPU samples, samples per ddpdoctor function) of py-spy's raw output."""
    total, own = 0, Counter()
    for line in raw.splitlines():
        stack, _, n = line.rstrip().rpartition(" ")
        if not stack or not n.isdigit():
            continue
        total += int(n)
        inner = stack.split(";")[-1]
        if _ours(inner):
            name, _, where = inner.partition(" (")
            own[f"{name} ({where.split(':')[0]})"] += int(n)
    return total, own


def _rank0_pid(run_dir: Path, deadline: float) -> int | None:
    ev = run_dir / "ranks" / "0" / "events.jsonl"
    while time.time() < deadline:
        try:
            lines = [json.loads(l) for l in ev.read_text().splitlines() if l.strip()]
        except (OSError, ValueError):
            lines = []
        start = next((e for e in lines if e.get("kind") == "start"), None)
        if start and any(e.get("kind") == "init" for e in lines):
            return int(start["pid"])
        time.sleep(0.2)
    return None


def _last_hb(run_dir: Path) -> dict | None:
    """Rank 0's latest heartbeat (its cost account and CPU time so far)."""
    sys.path.insert(0, str(ROOT))
    from ddpdoctor.record.reader import load_run

    try:
        rec = load_run(str(run_dir)).ranks.get(0)
    except Exception:  # a run directory being written: no figure this time
        return None
    return rec.last_hb if rec is not None else None


def self_share(h0: dict | None, h1: dict | None) -> float | None:
    """ddpdoctor's own share of rank 0's CPU time between two heartbeats, as it measured itself (%)."""
    if not h0 or not h1 or "cost" not in h0 or "cost" not in h1:
        return None
    c0, c1 = h0["cost"], h1["cost"]
    own = (c1["train_us"] - c0["train_us"]) + (c1.get("bg_total_us", 0) - c0.get("bg_total_us", 0))
    cpu = (float(h1["cpu"]) - float(h0["cpu"])) * 1e6
    return round(100 * own / cpu, 2) if cpu > 0 else None


def measure(command: str, nproc: int, seconds: float, rate: int, settle: float, pyspy: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="ddpd-share-") as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [
            sys.executable,
            "-m",
            "ddpdoctor",
            command,
            "--nproc-per-node",
            str(nproc),
            "--run-dir",
            str(run_dir),
            "--max-time",
            str(int(settle + seconds + 60)),
            str(LOOP),
            "--steps",
            "1000000",
        ]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        proc = subprocess.Popen(
            cmd, cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        try:
            pid = _rank0_pid(run_dir, time.time() + 120)
            if pid is None:
                return {"command": command, "error": "rank 0 did not start"}
            time.sleep(settle)
            out = Path(tmp) / "spy.txt"
            h0 = _last_hb(run_dir)
            subprocess.run(
                [
                    pyspy,
                    "record",
                    "-p",
                    str(pid),
                    "-r",
                    str(rate),
                    "-d",
                    str(int(seconds)),
                    "--format",
                    "raw",
                    "--nonblocking",
                    "-o",
                    str(out),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=seconds + 60,
            )
            h1 = _last_hb(run_dir)
            total, own = share(out.read_text() if out.exists() else "")
        finally:
            try:
                os.killpg(proc.pid, signal.SIGTERM)  # the monitor ends the ranks it started
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
    n = sum(own.values())
    return {
        "command": command,
        "samples": total,
        "own": n,
        "share_pct": round(100 * n / total, 2) if total else None,
        "self_pct": self_share(h0, h1),  # the same, as ddpdoctor measured itself in the window
        "top": [[k, round(100 * v / total, 2)] for k, v in own.most_common(8)] if total else [],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--command", action="append", choices=["hang", "check", "memleak", "profile"])
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--rate", type=int, default=400)
    ap.add_argument("--settle", type=float, default=3.0, help="seconds after rank 0's init before recording")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(pyspy).exists() and shutil.which(pyspy) is None:
        print("py-spy is needed (pip install py-spy)", file=sys.stderr)
        return 2
    results = []
    for command in args.command or ["hang", "check", "memleak", "profile"]:
        r = measure(command, args.nproc, args.seconds, args.rate, args.settle, pyspy)
        results.append(r)
        if "error" in r:
            print(f"{command}: {r['error']}", flush=True)
            continue
        top = ", ".join(f"{k} {v}%" for k, v in r["top"])
        print(
            f"{command}: {r['share_pct']}% of rank 0's on-CPU samples in ddpdoctor's own frames "
            f"({r['own']} of {r['samples']}); self-measured {r['self_pct']}%: {top}",
            flush=True,
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
