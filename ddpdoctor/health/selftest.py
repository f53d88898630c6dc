"""``ddpdoctor doctor``: the health check (``ddpdoctor.health``: environment, every collective, bandwidth) and
the self-test, which runs each built-in probe and compares its findings with the one its docstring names
(``Expected finding: <id>`` / ``Expected findings: none``; ``Self-test: <options>``)."""

from __future__ import annotations

import os
import re
import shlex
import sys
import threading
import time
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

import click

from ddpdoctor.analysis.findings import severity_rank
from ddpdoctor.analysis.ids import CRASH_ABNORMAL_EXIT, DOCTOR_PROBE_FAILED
from ddpdoctor.errors import ExitCode

_EXPECT = re.compile(r"^Expected findings?: (none|[a-z]+\.[a-z0-9-]+)", re.M)  # ids may hold digits (hang.p2p-...)
_OPTS = re.compile(r"^Self-test: (.+)$", re.M)
_COMMAND = re.compile(r"^Command: (\w+)$", re.M)


@dataclass(frozen=True)
class Probe:
    name: str
    path: str
    expected: str | None  # a finding id, or None for "no error findings"
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
        out.append(
            Probe(
                entry.name,
                str(entry),
                None if m.group(1) == "none" else m.group(1),
                tuple(shlex.split(o.group(1))) if o else (),
                c.group(1) if c else "hang",
            )
        )
    return out


def check_only(only: tuple[str, ...]) -> None:
    names = {p.name for p in probes()}
    unknown = [o for o in only if o not in names]
    if unknown:
        from ddpdoctor.errors import DdpdoctorError

        raise DdpdoctorError(f"--only {unknown[0]}: no such probe (probes: {', '.join(sorted(names))})")


class Progress:
    """Where the self-test is: ``[3/31] hang rank_conditional.py ...``. On a terminal the line is redrawn
    in place with the seconds so far and replaced by the probe's result line; elsewhere (CI logs) it is
    printed once, before the probe runs, so a log shows which probe a stuck run is in."""

    def __init__(self, stream: Any, total: int) -> None:
        from ddpdoctor.render.live.terminal import wanted

        self.stream, self.total = stream, total
        self.tty = wanted(stream)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _write(self, text: str) -> None:
        with self._lock:
            self.stream.write(text)
            self.stream.flush()

    def start(self, i: int, probe: Probe) -> None:
        head = f"[{i}/{self.total}] {probe.command} {probe.name} ..."
        if not self.tty:
            self._write(head + "\n")
            return
        t0 = time.monotonic()
        self._stop.clear()

        def tick() -> None:
            while True:
                self._write(f"\r\x1b[K{head} {time.monotonic() - t0:.0f} s")
                if self._stop.wait(0.5):
                    return

        self._thread = threading.Thread(target=tick, name="ddpdoctor-progress", daemon=True)
        self._thread.start()

    def clear(self) -> None:
        """Stop redrawing and erase the progress line (a terminal only)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=2.0)
            self._thread = None
            self._write("\r\x1b[K")

    def done(self, line: str) -> None:
        """The probe's result line, in place of the progress line."""
        self.clear()
        self._write(line + "\n")


def run_probes(only: tuple[str, ...], root: str) -> list[dict]:
    """Run each probe (or only those named) under its command; one line per probe; the results."""
    results = []
    from ddpdoctor.cli.options import run_command
    from ddpdoctor.commands import COMMANDS
    from ddpdoctor.launch.command import run_params

    check_only(only)
    todo = [p for p in probes() if not only or p.name in only]
    progress = Progress(sys.stdout, len(todo))
    for i, p in enumerate(todo, 1):
        progress.start(i, p)
        t0 = time.time()
        # the probe's options are parsed by the command itself, exactly as on the command line
        # (``Self-test: OPTIONS -- ARGS``: ddpdoctor's options, then the probe and its arguments, torchrun's order)
        opts = list(p.options)
        mine, theirs = (opts[: opts.index("--")], opts[opts.index("--") + 1 :]) if "--" in opts else (opts, [])
        args = ["--run-dir", os.path.join(root, p.name[:-3]), *mine, p.path, *theirs]
        first_why: str | None = None
        for attempt in (1, 2):
            params = run_command(COMMANDS[p.command]).make_context(p.command, args).params
            try:
                report = run_params(COMMANDS[p.command], params, quiet=True)
            except BaseException:
                progress.clear()
                raise
            got = [f.id for f in report.findings if f.severity in ("error", "warning")]
            ok = (p.expected in got) if p.expected else not [f for f in report.findings if f.severity == "error"]
            why = None if ok or attempt == 2 else never_began(report)
            if why is None:
                break
            # the scenario never began (a rank was killed before any rank initialised): that run tests no
            # detector, so it is run once more, in a fresh folder, and the line says why
            first_why = why
            args[1] = os.path.join(root, p.name[:-3] + "-rerun")
        results.append(
            {
                "probe": p.name,
                "expected": p.expected or "none",
                "got": got,
                "ok": ok,
                "seconds": round(time.time() - t0, 1),
                "run_dir": report.run_dir,
                "first_run_never_began": first_why,
            }
        )
        mark = "ok  " if ok else "FAIL"
        progress.done(
            f"{mark} {p.name:24s} expected {p.expected or 'no findings':36s} got "
            f"{', '.join(got) or 'no findings'}  ({time.time() - t0:.1f} s)"
            + (f" (second run; the first never began: {first_why})" if first_why else "")
        )
    return results


def never_began(report: Any) -> str | None:
    """Why a probe's run never reached its scenario, or None: no rank initialised and a rank ended from
    outside (a signal, torchrun's kill) before it finished. A script error is not such a reason."""
    from ddpdoctor.record import schema
    from ddpdoctor.record.reader import load_run

    try:
        record = load_run(report.run_dir)
    except Exception:
        return None
    if any(rec.event(schema.K_INIT) for rec in record.ranks.values()):
        return None
    for f in report.findings:
        if f.id == CRASH_ABNORMAL_EXIT and "ended without finishing" in f.message:
            return f.message
    return None


def run_doctor(
    only: tuple[str, ...],
    runs_root: str | None,
    json_path: str | None,
    junit_path: str | None,
    fail_on: str = "error",
    skip_probes: bool = False,
    skip_health: bool = False,
    torchrun: dict | None = None,
    backend: str = "auto",
    timeout: float = 60.0,
    sizes: list[int] | None = None,
    min_busbw: float | None = None,
    select: tuple[str, ...] = (),
    ignore: tuple[str, ...] = (),
) -> int:
    """The health check (environment, collectives, bandwidth) and the probes' self-test; the reports."""
    from ddpdoctor.health import report as hr
    from ddpdoctor.launch.command import check_writable

    check_writable(json_path)
    check_writable(junit_path)
    if json_path == "-" and junit_path == "-":
        from ddpdoctor.errors import DdpdoctorError

        raise DdpdoctorError("--json - and --junit -: only one report can go to standard output")
    to_stdout = "-" in (json_path, junit_path)
    check_only(only)

    def say(text: str) -> None:
        click.echo(text, err=to_stdout, nl=False)

    root = os.path.abspath(runs_root or os.path.join("ddpdoctor-runs", f"doctor-{time.strftime('%Y%m%d-%H%M%S')}"))
    os.makedirs(root, mode=0o700, exist_ok=True)
    os.chmod(root, 0o700)
    result: dict = {"run_dir": root, "findings": [], "results": None, "health": None, "fail_on": fail_on}
    if not skip_health:
        from ddpdoctor.health.run import run_health

        h = run_health(
            root, torchrun or {}, backend, timeout, sizes, min_busbw, echo=lambda line: click.echo(line, err=True)
        )
        result["health"] = h
        result["findings"] = list(h["findings"])
        say(hr.text(result))
    if not skip_probes:
        if to_stdout:  # the probes' lines go to stderr when stdout carries a report
            import contextlib
            import sys

            with contextlib.redirect_stdout(sys.stderr):
                result["results"] = run_probes(only, root)
        else:
            result["results"] = run_probes(only, root)
        for r in result["results"]:
            if not r["ok"]:
                from ddpdoctor.analysis.findings import Finding

                result["findings"].append(
                    Finding(
                        DOCTOR_PROBE_FAILED,
                        "error",
                        f"probe {r['probe']} expected {r['expected']}, got {', '.join(r['got']) or 'no findings'}",
                        f"A ddpdoctor detector does not work on this machine: see {r['run_dir']} (`ddpdoctor analyze` "
                        "it) and report it with the run directory.",
                    )
                )
    if select or ignore:  # --select/--ignore on the health check's and the self-test's own findings
        from ddpdoctor.analysis.config import Config
        from ddpdoctor.analysis.registry import pick

        result["findings"], left = pick(result["findings"], Config(select=select, ignore=ignore))
        if left:
            say(left[0] + "\n")
    result["findings"].sort(key=lambda f: severity_rank(f.severity))
    bad = [f for f in result["findings"] if severity_rank(f.severity) <= severity_rank(fail_on)]
    result["verdict"] = "findings" if bad else "ok"
    result["exit_code"] = ExitCode.FINDINGS if bad else ExitCode.OK
    say(hr.verdict_lines(result))
    for path, render in ((json_path, hr.json_text), (junit_path, hr.junit)):
        if not path:
            continue
        if path == "-":
            click.echo(render(result), nl=False)
            continue
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(render(result))
        except OSError as e:
            from ddpdoctor.errors import DdpdoctorError

            raise DdpdoctorError(f"cannot write {path}: {e.strerror}") from None
    return result["exit_code"]
