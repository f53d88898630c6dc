"""Accuracy of ddpdoctor's verdicts on the corpus of realistic DDP scripts (tests/corpus/).

Runs each case of tests/corpus/cases.py, one at a time, as a user would:
    .venv/bin/ddpdoctor <command> --nproc-per-node N [options] --json F --run-dir D S ARGS
bounded by a timeout, in a temporary working directory that is removed afterwards; then compares the
JSON report with what the case expects (verdict, exit code, error-severity finding ids, culprit ranks,
the `# FAULT` line) and prints per-case pass/fail with the reason, per finding id precision and recall,
and the number of error-severity findings on healthy cases (the goal is 0).

    python benchmarks/accuracy.py                 # every case (sequential; takes a while)
    python benchmarks/accuracy.py --subset fast   # the few cases tests/e2e/test_corpus.py also runs
    python benchmarks/accuracy.py -k f2 -k h05    # cases whose id contains any PATTERN
    python benchmarks/accuracy.py --json out.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
sys.path.insert(0, str(CORPUS))
from cases import CASES  # noqa: E402

NON_CULPRIT_ROLES = ("waiting", "victim")  # a location with another role names a rank that caused it
IGNORED_IDS = {"teardown.gloo-abort"}  # known torch 2.13 + gloo exit abort; reported, never scored


def ddpdoctor_exe() -> list[str]:
    exe = ROOT / ".venv" / "bin" / "ddpdoctor"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "ddpdoctor"]


def marker_lines(script: Path, markers: tuple[str, ...]) -> dict[int, str]:
    """Line number -> marker, for every line ending in a comment `# MARKER` (MARKER in markers)."""
    found = {}
    for i, line in enumerate(script.read_text().splitlines(), 1):
        m = re.search(r"#\s*(FAULT(?:-[A-Z]+)?)\b", line)
        if m and m.group(1) in markers:
            found[i] = m.group(1)
    return found


def run_case(case: dict, timeout: float, keep: Path | None = None) -> dict:
    """Run one case; return the raw outcome (exit code, report, seconds, stderr tail)."""
    work = Path(tempfile.mkdtemp(prefix="ddpdoctor-acc-"))
    script = CORPUS / case["script"]
    jpath = work / "report.json"
    cmd = [
        *ddpdoctor_exe(),
        case["command"],
        "--nproc-per-node",
        str(case["nproc"]),
        *case["options"],
        "--json",
        str(jpath),
        "--run-dir",
        str(work / "run"),
        str(script),
    ]
    cmd += case["args"]  # after the script, the script's (torchrun's rule)
    t0 = time.time()
    proc = subprocess.Popen(
        cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            out, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate(timeout=10)
    seconds = time.time() - t0
    report = None
    if jpath.exists():
        try:
            report = json.loads(jpath.read_text())
        except json.JSONDecodeError:
            report = None
    if keep is not None:
        dest = keep / case["id"].replace(":", "-")
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(work, dest, ignore=shutil.ignore_patterns("*.pt", "*.pth", "*.tar", "*.ckpt"))
    shutil.rmtree(work, ignore_errors=True)
    return {
        "code": proc.returncode,
        "report": report,
        "seconds": round(seconds, 1),
        "timed_out": timed_out,
        "cmd": " ".join(cmd[1:]),
        "stderr_tail": (err or "")[-1500:],
        "stdout_tail": (out or "")[-600:],
    }


def culprits_of(f: dict) -> tuple[list[int], str]:
    """The finding's culprit ranks and where they came from: 'field', 'roles' (fallback), or 'unknown'."""
    if f.get("culprits"):
        return sorted(set(f["culprits"])), "field"
    from_roles = sorted(
        {l["rank"] for l in f.get("locations", []) if not str(l.get("role", "")).startswith(NON_CULPRIT_ROLES)}
    )
    return (from_roles, "roles") if from_roles else ([], "unknown")


def summarise(report: dict | None) -> dict:
    if not report:
        return {"verdict": None, "findings": []}
    fs = []
    for f in report.get("findings", []):
        culprits, source = culprits_of(f)
        fs.append(
            {
                "id": f["id"],
                "severity": f["severity"],
                "culprits": culprits,
                "culprit_source": source,
                "locations": [
                    f"r{l['rank']}:{Path(l['file']).name}:{l['line']}({l.get('role', '')})"
                    for l in f.get("locations", [])
                ],
            }
        )
    return {"verdict": report.get("verdict"), "findings": fs}


def judge(case: dict, outcome: dict) -> dict:
    """Compare one outcome with the case's expectation. Returns pass/fail, the reasons, and the ids."""
    reasons: list[str] = []
    notes: list[str] = []
    report = outcome["report"]
    if outcome["timed_out"]:
        reasons.append(f"runner timeout after {outcome['seconds']} s")
    if report is None:
        reasons.append(f"no JSON report (exit {outcome['code']})")
        return {
            "ok": False,
            "reasons": reasons,
            "notes": notes,
            "errors": [],
            "warnings": [],
            "culprit": "n/a",
            "line": "n/a",
        }
    findings = report.get("findings", [])
    errors = sorted({f["id"] for f in findings if f["severity"] == "error"} - IGNORED_IDS)
    warnings = sorted({f["id"] for f in findings if f["severity"] == "warning"} - IGNORED_IDS)
    if any(f["id"] in IGNORED_IDS for f in findings):
        notes.append("teardown.gloo-abort seen (ignored)")
    if report.get("verdict") != case["verdict"]:
        reasons.append(f"verdict {report.get('verdict')} != {case['verdict']}")
    if outcome["code"] != case["exit_code"]:
        reasons.append(f"exit {outcome['code']} != {case['exit_code']}")
    missing = sorted(case["error_ids"] - set(errors))
    extra = sorted(set(errors) - case["error_ids"] - case["tolerate"])
    if missing:
        reasons.append(f"missing error {missing}")
    if extra:
        reasons.append(f"unexpected error {extra}")
    missing_w = sorted(case["warn_ids"] - set(warnings) - set(errors))
    if missing_w:
        reasons.append(f"missing warning {missing_w}")
    culprit_state, line_state = "n/a", "n/a"
    if case["primary"]:
        prim = next((f for f in findings if f["id"] == case["primary"]), None)
        if prim is None:
            culprit_state = line_state = "no finding"
        else:
            got, source = culprits_of(prim)
            accepted = [sorted(c) for c in case["culprits"]]
            if source == "unknown":
                culprit_state = "unknown"
                reasons.append("culprit unknown (no culprits field, no culprit-role location)")
            elif got in accepted:
                culprit_state = "ok" if source == "field" else "ok (from roles)"
            else:
                culprit_state = f"wrong {got}"
                reasons.append(f"culprits {got} ({source}) not in {accepted}")
            if source == "roles":
                notes.append("culprits field empty: taken from location roles")
            if case["markers"]:
                script = CORPUS / case["script"]
                want = marker_lines(script, case["markers"])
                ranks_ok = {r for c in case["culprits"] for r in c}
                named = [
                    (l["rank"], l["line"]) for l in prim.get("locations", []) if Path(l["file"]).name == script.name
                ]
                hit = [(r, ln) for r, ln in named if ln in want and r in ranks_ok]
                if hit:
                    line_state = (
                        "ok"
                        if all(want[ln] == "FAULT" for _, ln in hit)
                        else "ok (" + ",".join(sorted({want[ln] for _, ln in hit})) + ")"
                    )
                else:
                    line_state = "wrong"
                    reasons.append(
                        f"line: want {sorted(want)} on rank(s) {sorted(ranks_ok)}, got "
                        f"{named or [l['file'].split('/')[-1] + ':' + str(l['line']) for l in prim.get('locations', [])] or 'no location'}"
                    )
    return {
        "ok": not reasons,
        "reasons": reasons,
        "notes": notes,
        "errors": errors,
        "warnings": warnings,
        "culprit": culprit_state,
        "line": line_state,
    }


def scores(results: list[dict]) -> dict:
    """Per finding id: tp, fp, fn, precision, recall (error and warning severities; notes not scored)."""
    ids: dict[str, dict] = {}

    def row(i):
        return ids.setdefault(i, {"tp": 0, "fp": 0, "fn": 0})

    for r in results:
        case = r["case"]
        expected = set(case["error_ids"]) | set(case["warn_ids"])
        got = set(r["judge"]["errors"]) | set(r["judge"]["warnings"])
        for i in expected & got:
            row(i)["tp"] += 1
        for i in expected - got:
            row(i)["fn"] += 1
        for i in got - expected - set(case["tolerate"]):
            row(i)["fp"] += 1
    for v in ids.values():
        v["precision"] = round(v["tp"] / (v["tp"] + v["fp"]), 2) if v["tp"] + v["fp"] else None
        v["recall"] = round(v["tp"] / (v["tp"] + v["fn"]), 2) if v["tp"] + v["fn"] else None
    return dict(sorted(ids.items()))


def select(subset: str | None, patterns: list[str]) -> list[dict]:
    cases = CASES
    if subset == "fast":
        cases = [c for c in cases if c["fast"]]
    if patterns:
        cases = [c for c in cases if any(p in c["id"] for p in patterns)]
    return cases


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subset", choices=["fast", "all"], default="all")
    ap.add_argument("-k", action="append", default=[], metavar="PATTERN", help="run cases whose id contains it")
    ap.add_argument("--json", metavar="OUT", help="write every case's outcome and the scores as JSON")
    ap.add_argument("--timeout", type=float, default=240, help="seconds per case before the runner ends it")
    ap.add_argument("--keep", metavar="DIR", help="copy each case's run directory and report here")
    args = ap.parse_args(argv)
    cases = select(args.subset, args.k)
    if not cases:
        print("no case matches", file=sys.stderr)
        return 2
    keep = Path(args.keep) if args.keep else None
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now().isoformat(timespec="seconds")
    results = []
    for n, case in enumerate(cases, 1):
        outcome = run_case(case, args.timeout, keep)
        j = judge(case, outcome)
        results.append({"case": case, "outcome": outcome, "judge": j, "summary": summarise(outcome["report"])})
        s = summarise(outcome["report"])
        got = (
            "; ".join(
                f"{f['id']}[{f['severity'][0]}] culprits={f['culprits']}"
                for f in s["findings"]
                if f["severity"] != "note"
            )
            or "no findings"
        )
        print(
            f"[{n}/{len(cases)}] {'PASS' if j['ok'] else 'FAIL'} {case['id']} ({outcome['seconds']} s, "
            f"exit {outcome['code']}, {s['verdict']}): {got}",
            flush=True,
        )
        for reason in j["reasons"]:
            print(f"      - {reason}", flush=True)
    healthy = [r for r in results if not r["case"]["error_ids"] and not r["case"]["warn_ids"]]
    healthy_errors = sum(len(r["judge"]["errors"]) for r in healthy)
    healthy_warnings = sum(len(r["judge"]["warnings"]) for r in healthy)
    sc = scores(results)
    passed = sum(r["judge"]["ok"] for r in results)
    faults = [r for r in results if r["case"]["primary"]]
    print()
    print(f"cases: {passed}/{len(results)} pass ({started}, {sum(r['outcome']['seconds'] for r in results):.0f} s)")
    print(
        f"healthy cases: {len(healthy)}, error-severity findings on them: {healthy_errors} (goal 0), "
        f"warnings: {healthy_warnings}"
    )
    print(
        f"fault cases: {len(faults)}, right finding: {sum(r['case']['primary'] in r['judge']['errors'] + r['judge']['warnings'] for r in faults)}, "
        f"right culprits: {sum(r['judge']['culprit'].startswith('ok') for r in faults)}, "
        f"culprit unknown: {sum(r['judge']['culprit'] == 'unknown' for r in faults)}, "
        f"right line: {sum(r['judge']['line'].startswith('ok') for r in faults)}"
    )
    print(f"{'finding id':38} {'tp':>3} {'fp':>3} {'fn':>3} {'precision':>9} {'recall':>6}")
    for i, v in sc.items():
        p = "-" if v["precision"] is None else f"{v['precision']:.2f}"
        r = "-" if v["recall"] is None else f"{v['recall']:.2f}"
        print(f"{i:38} {v['tp']:3} {v['fp']:3} {v['fn']:3} {p:>9} {r:>6}")
    if args.json:

        def plain(o):
            if isinstance(o, (set, frozenset)):
                return sorted(o)
            raise TypeError(type(o))

        Path(args.json).write_text(
            json.dumps(
                {
                    "started": started,
                    "cases": len(results),
                    "passed": passed,
                    "healthy_error_findings": healthy_errors,
                    "scores": sc,
                    "results": [
                        {
                            "id": r["case"]["id"],
                            "ok": r["judge"]["ok"],
                            "reasons": r["judge"]["reasons"],
                            "notes": r["judge"]["notes"],
                            "culprit": r["judge"]["culprit"],
                            "line": r["judge"]["line"],
                            "exit_code": r["outcome"]["code"],
                            "seconds": r["outcome"]["seconds"],
                            "command": r["outcome"]["cmd"],
                            "report": r["summary"],
                            "stderr_tail": r["outcome"]["stderr_tail"] if not r["judge"]["ok"] else "",
                        }
                        for r in results
                    ],
                },
                indent=1,
                default=plain,
            )
        )
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
