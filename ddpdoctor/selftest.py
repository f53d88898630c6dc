"""``ddpdoctor doctor``: run each built-in probe and compare its findings with the one its docstring
names (``Expected finding: <id>`` / ``Expected findings: none``; ``Self-test: <options>``)."""

from __future__ import annotations

import json
import os
import re
import shlex
import time
from dataclasses import dataclass
from importlib.resources import files

import click

from ddpdoctor.analysis.model import ExitCode

_EXPECT = re.compile(r"^Expected findings?: (none|[a-z]+\.[a-z-]+)", re.M)
_OPTS = re.compile(r"^Self-test: (.+)$", re.M)
_COMMAND = re.compile(r"^Command: (\w+)$", re.M)


@dataclass(frozen=True)
class Probe:
    name: str
    path: str
    expected: str | None     # a finding id, or None for "no error findings"
    options: tuple[str, ...]
    command: str = "hang"


def probes() -> list[Probe]:
    out = []
    root = files("ddpdoctor.probes")
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".py") or entry.name.startswith("_"):
            continue
        text = entry.read_text(encoding="utf-8")
        m = _EXPECT.search(text)
        if not m:
            continue
        o = _OPTS.search(text)
        c = _COMMAND.search(text)
        out.append(Probe(entry.name, str(entry), None if m.group(1) == "none" else m.group(1),
                         tuple(shlex.split(o.group(1))) if o else (), c.group(1) if c else "hang"))
    return out


def run_selftest(only: tuple[str, ...], runs_root: str | None, json_path: str | None,
                 junit_path: str | None) -> int:

    root = os.path.abspath(runs_root or os.path.join("ddpdoctor-runs", f"doctor-{time.strftime('%Y%m%d-%H%M%S')}"))
    os.makedirs(root, mode=0o700, exist_ok=True)
    results = []
    from ddpdoctor.cli import cli
    from ddpdoctor.commands import COMMANDS
    from ddpdoctor.launch.command import run_params

    for p in probes():
        if only and p.name not in only:
            continue
        t0 = time.time()
        # the probe's options are parsed by the command itself, exactly as on the command line
        args = ["--script", p.path, "--run-dir", os.path.join(root, p.name[:-3]), *p.options]
        params = cli.commands[p.command].make_context(p.command, args).params
        report = run_params(COMMANDS[p.command], params, quiet=True)
        got = [f.id for f in report.findings if f.severity in ("error", "warning")]
        ok = (p.expected in got) if p.expected else not [f for f in report.findings if f.severity == "error"]
        results.append({"probe": p.name, "expected": p.expected or "none", "got": got, "ok": ok,
                        "seconds": round(time.time() - t0, 1), "run_dir": report.run_dir})
        mark = "ok  " if ok else "FAIL"
        click.echo(f"{mark} {p.name:24s} expected {p.expected or 'no findings':36s} got "
                   f"{', '.join(got) or 'no findings'}  ({time.time() - t0:.1f} s)")
    bad = [r for r in results if not r["ok"]]
    click.echo(f"ddpdoctor doctor: {len(results) - len(bad)}/{len(results)} probes gave their expected verdict; "
               f"runs in {root}")
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump({"schema": "ddpdoctor.doctor", "version": 1, "results": results}, f, indent=2)
    if junit_path:
        with open(junit_path, "w", encoding="utf-8") as f:
            f.write(_junit(results))
    return ExitCode.FINDINGS if bad else ExitCode.OK


def _junit(results: list[dict]) -> str:
    from xml.etree import ElementTree as ET

    suite = ET.Element("testsuite", name="ddpdoctor.doctor", tests=str(len(results)),
                       failures=str(sum(not r["ok"] for r in results)), errors="0", skipped="0")
    for r in results:
        tc = ET.SubElement(suite, "testcase", classname="ddpdoctor.doctor", name=r["probe"], time=str(r["seconds"]))
        if not r["ok"]:
            ET.SubElement(tc, "failure", message=f"expected {r['expected']}, got {', '.join(r['got']) or 'nothing'}",
                          type="probe").text = r["run_dir"]
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
