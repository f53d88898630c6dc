"""Time ``ddpdoctor analyze`` on synthetic multi-node jobs (benchmarks/synth_run.py) of growing size.

For each size: generate the job, run ``ddpdoctor analyze <node dirs> --json`` as a subprocess, and
record wall time, peak RSS (``ru_maxrss`` of the child), the exit code, whether the finding names the
culprit rank and line, and the length of the longest message. Writes a JSON summary and an SVG of time
and memory against ranks.

    python benchmarks/analyze_scale.py --ranks 8 128 1024 4096 --svg docs/analyze-scale.svg
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run_one(ranks: int, colls: int, work: str) -> dict:
    out = os.path.join(work, f"job{ranks}")
    nodes = max(1, ranks // 8)
    subprocess.run(
        [
            sys.executable,
            os.path.join(HERE, "synth_run.py"),
            "--nodes",
            str(nodes),
            "--colls",
            str(colls),
            "--out",
            out,
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    dirs = sorted(os.path.join(out, d) for d in os.listdir(out) if d.startswith("node"))
    jpath = os.path.join(work, f"report{ranks}.json")
    err = tempfile.TemporaryFile()
    t0 = time.perf_counter()
    p = subprocess.Popen(
        [sys.executable, "-m", "ddpdoctor", "analyze", "--json", jpath, *dirs], stdout=subprocess.DEVNULL, stderr=err
    )
    _pid, status, usage = os.wait4(p.pid, 0)  # this child's own peak RSS (KiB on Linux)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    peak = usage.ru_maxrss
    err.seek(0)
    stderr = err.read().decode("utf-8", "replace")
    culprit = (nodes * 8) // 2
    ok, longest, fid = False, 0, None
    try:
        with open(jpath, encoding="utf-8") as f:
            rep = json.load(f)
        errs = [x for x in rep["findings"] if x["severity"] == "error"]
        fid = errs[0]["id"] if errs else None
        longest = max((len(x["message"]) for x in rep["findings"]), default=0)
        ok = any(
            x["id"] == "hang.rank-conditional-collective"
            and any(l["rank"] == culprit and l["line"] == 12 and l["role"] == "diverged" for l in x["locations"])
            for x in errs
        )
    except (OSError, ValueError, KeyError):
        pass
    size = sum(os.path.getsize(os.path.join(r, f)) for r, _d, fs in os.walk(out) for f in fs)
    shutil.rmtree(out, ignore_errors=True)
    return {
        "ranks": nodes * 8,
        "colls": colls,
        "wall_s": round(wall, 2),
        "peak_rss_mb": round(peak / 1024, 1),
        "rc": p.returncode,
        "finding": fid,
        "culprit_and_line_right": ok,
        "longest_message": longest,
        "job_mb": round(size / 1e6, 1),
        "stderr_tail": stderr[-300:] if p.returncode not in (0, 3) else "",
    }


def svg(rows: list[dict], path: str) -> None:
    """Two log-x panels (time, memory) drawn by hand: no plotting dependency."""
    import math

    w, h, pad = 640, 260, 50
    xs = [math.log2(r["ranks"]) for r in rows]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{2 * h}" font-family="sans-serif" font-size="11">'
    ]
    for panel, (key, label, colour) in enumerate(
        (("wall_s", "analyze wall time (s)", "#1f77b4"), ("peak_rss_mb", "analyze peak RSS (MB)", "#d62728"))
    ):
        top = panel * h
        vals = [r[key] or 0 for r in rows]
        vmax = max(vals) * 1.15 or 1
        px = [pad + (x - x0) / (x1 - x0) * (w - 2 * pad) for x in xs]
        py = [top + h - pad - v / vmax * (h - 2 * pad) for v in vals]
        parts.append(
            f'<text x="{pad}" y="{top + 20}" font-size="13">{label} against ranks '
            f"({rows[0]['colls']} collectives per rank)</text>"
        )
        parts.append(f'<line x1="{pad}" y1="{top + h - pad}" x2="{w - pad}" y2="{top + h - pad}" stroke="#000"/>')
        parts.append(f'<line x1="{pad}" y1="{top + pad}" x2="{pad}" y2="{top + h - pad}" stroke="#000"/>')
        for i in range(5):
            v = vmax * i / 4
            y = top + h - pad - v / vmax * (h - 2 * pad)
            parts.append(f'<text x="{pad - 6}" y="{y + 4:.1f}" text-anchor="end">{v:.3g}</text>')
            parts.append(f'<line x1="{pad}" y1="{y:.1f}" x2="{w - pad}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(
            '<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>'.format(
                colour, " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(px, py))
            )
        )
        for a, b, r, v in zip(px, py, rows, vals):
            parts.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{colour}"/>')
            parts.append(f'<text x="{a:.1f}" y="{b - 7:.1f}" text-anchor="middle">{v:g}</text>')
            parts.append(f'<text x="{a:.1f}" y="{top + h - pad + 15}" text-anchor="middle">{r["ranks"]}</text>')
        parts.append(f'<text x="{w / 2}" y="{top + h - pad + 32}" text-anchor="middle">ranks (log scale)</text>')
    parts.append("</svg>\n")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 128, 1024, 4096])
    ap.add_argument("--colls", type=int, default=2000)
    ap.add_argument("--work", default=None, help="where to generate the jobs (default: a temporary dir)")
    ap.add_argument("--json", dest="json_path", default=None)
    ap.add_argument("--svg", default=None)
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="ddpdoctor-scale-")
    rows = []
    for n in sorted(a.ranks):
        row = run_one(n, a.colls, work)
        print(json.dumps(row), flush=True)
        rows.append(row)
    if a.json_path:
        with open(a.json_path, "w", encoding="utf-8") as f:
            json.dump({"load": os.getloadavg(), "rows": rows}, f, indent=1)
    if a.svg:
        svg(rows, a.svg)
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
