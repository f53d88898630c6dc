"""Findings, reports and the one frozen config that holds every threshold. Pure: no torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

REPORT_SCHEMA = "ddpdoctor.report"
REPORT_VERSION = 1


class ExitCode:
    """The documented exit codes (README, docs/cli.md)."""

    OK = 0           # healthy (warnings and notes do not fail a run unless --fail-on asks)
    FINDINGS = 1     # findings of severity error (a crash, a leak, a data mistake)
    USAGE = 2        # usage or bad input: missing script, syntax error, bad option, bad run dir
    HANG = 3         # a hang or a divergence that gloo turned into an error
    NOT_RUN = 4      # could not run: the script ended before init_process_group, torchrun failed
    INTERNAL = 5     # a bug in ddpdoctor
    INTERRUPTED = 130


SEVERITIES = ("error", "warning", "note")


@dataclass(frozen=True)
class Config:
    """Thresholds for detection; the CLI maps options onto it."""

    timeout: float = 60.0     # an uncertain wait becomes a hang after this many seconds
    settle: float = 1.0       # a mismatch must hold this long before it is called certain
    stale: float = 3.0        # a rank whose heartbeat is older than this is unresponsive
    heartbeat: float = 0.25   # rank heartbeat period
    grace: float = 3.0        # TERM -> KILL grace when ending the process tree
    dump_wait: float = 3.0    # how long the monitor waits for stack dumps
    fail_on: str = "error"    # lowest severity that makes the exit code non-zero


@dataclass(frozen=True)
class Location:
    rank: int
    file: str
    line: int
    func: str = ""
    role: str = ""   # "diverged", "waiting", "raised", "busy", "victim", ...

    def short(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Finding:
    id: str
    severity: str
    message: str
    hint: str = ""
    ranks: tuple[int, ...] = ()
    locations: tuple[Location, ...] = ()
    evidence: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class RankLine:
    """One rank's state as the report shows it."""

    rank: int
    state: str     # finished | crashed | waiting | busy | killed | unresponsive | not-started
    detail: str
    location: Location | None = None


@dataclass(frozen=True)
class Report:
    command: str
    verdict: str               # ok | hang | crash | error
    exit_code: int
    run_dir: str
    findings: tuple[Finding, ...] = ()
    ranks: tuple[RankLine, ...] = ()
    summary: str = ""
    notes: tuple[str, ...] = ()
