"""Do two builds of ddpdoctor give the same findings on the same saved runs? (A refactoring's proof.)

    python benchmarks/same_findings.py --old /path/to/old/.venv/bin/ddpdoctor --new .venv/bin/ddpdoctor \
        tests/golden/* /tmp/acc-runs/*

Runs ``ddpdoctor analyze DIR --json -`` with each build on every run directory (no torch, no ranks) and
compares what a user sees: verdict, exit code, and per finding its id, severity, culprits, ranks, message,
hint and locations. Prints one line per run directory that differs and a summary; exit 1 if any differs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile


def view(exe: str, run_dir: str) -> dict:
    # on a copy: analyze writes its pictures (report.html, memory.svg) into the run directory, and the
    # directories compared (golden fixtures among them) must stay as they are
    with tempfile.TemporaryDirectory() as tmp:
        copy = shutil.copytree(run_dir, os.path.join(tmp, "run"))
        p = subprocess.run([exe, "analyze", copy, "--json", "-"], capture_output=True, text=True, timeout=300)
    try:
        rep = json.loads(p.stdout.replace(copy, run_dir))
    except json.JSONDecodeError:
        return {"exit": p.returncode, "error": p.stderr.strip().splitlines()[-1:] if p.stderr else []}
    return {
        "exit": p.returncode,
        "verdict": rep.get("verdict"),
        "findings": [
            {k: f.get(k) for k in ("id", "severity", "culprits", "ranks", "message", "hint", "locations")}
            for f in rep.get("findings", [])
        ],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="the old build's ddpdoctor executable")
    ap.add_argument("--new", required=True, help="the new build's ddpdoctor executable")
    ap.add_argument("run_dirs", nargs="+")
    a = ap.parse_args()
    differ = 0
    for d in a.run_dirs:
        old, new = view(a.old, d), view(a.new, d)
        if old != new:
            differ += 1
            print(f"DIFFERS {d}\n  old: {json.dumps(old)[:600]}\n  new: {json.dumps(new)[:600]}")
        else:
            ids = ",".join(f["id"] for f in new.get("findings", [])) or "no findings"
            print(f"same    {d}: exit {new['exit']}, {new.get('verdict')}: {ids}")
    print(f"{len(a.run_dirs) - differ} of {len(a.run_dirs)} run directories give the same report")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
