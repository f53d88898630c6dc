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

from ddpdoctor.analysis.model import Config, ExitCode

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


def _split(options: tuple[str, ...]) -> tuple[float, tuple[str, ...], dict[str, str]]:
    """``--timeout S --census-every K -- script args`` -> (timeout, script args, other options)."""
    args: tuple[str, ...] = ()
    if "--" in options:
        i = options.index("--")
        options, args = options[:i], options[i + 1:]
    opts = dict(zip(options[::2], options[1::2]))
    return float(opts.pop("--timeout", 60.0)), tuple(args), opts


def _extra(command: str, opts: dict[str, str]) -> dict | None:
    if command == "check":
        return {"checks": {"every": int(opts.get("--fingerprint-every", 10))}, "stop": {}}
    if command == "profile":
        return {"profile": {"nsys": False}, "stop": {}}
    if command == "memleak":
        ce = opts.get("--census-every")
        return {"memory": {"census_every": int(ce) if ce else None}, "stop": {}}
    return None


def run_selftest(only: tuple[str, ...], runs_root: str | None, json_path: str | None,
                 junit_path: str | None) -> int:
    from ddpdoctor.launch.command import run_command

    root = os.path.abspath(runs_root or os.path.join("ddpdoctor-runs", f"doctor-{time.strftime('%Y%m%d-%H%M%S')}"))
    os.makedirs(root, mode=0o700, exist_ok=True)
    results = []
    for p in probes():
        if only and p.name not in only:
            continue
        timeout, args, opts = _split(p.options)
        t0 = time.time()
        extra = _extra(p.command, opts)
        report = run_command(p.command, p.path, args, {}, "auto", os.path.join(root, p.name[:-3]), None,
                             Config(timeout=timeout), None, None, quiet=True, extra=extra)
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
    return ExitCode.FINDINGS if bad else ExitCode.OK
