"""Findings, locations, reports and exit codes: what a diagnosis produces. Pure: no torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

REPORT_SCHEMA = "ddpdoctor.report"
REPORT_VERSION = 2  # 2: findings carry `culprits`; location roles documented

Severity = Literal["error", "warning", "note"]
Verdict = Literal["ok", "findings", "crash", "hang", "error"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "note")  # most severe first


def severity_rank(severity: str) -> int:
    """0 for error, 1 warning, 2 note (3 for anything else): the one order of severities."""
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Location:
    rank: int
    file: str
    line: int
    func: str = ""
    role: str = ""  # culprit roles: "diverged", "raised", "exited", "slow"...; others: "waiting", "victim"

    def short(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Finding:
    """One diagnosis. ``ranks`` are every rank involved; ``culprits`` the ranks that caused it (the rank
    that diverged, raised first, leaks, is slow), apart from the ranks that only wait or fail because of
    them. A fault every rank shares (a forgotten ``set_epoch``) names every rank as culprit."""

    id: str
    severity: Severity
    message: str
    hint: str = ""
    ranks: tuple[int, ...] = ()
    locations: tuple[Location, ...] = ()
    evidence: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    culprits: tuple[int, ...] = ()


def rank_list(ranks: Any) -> str:
    """Ranks as sorted ranges, short at any world size: ``[0-3,5,7-9]``."""
    rs = sorted({int(r) for r in ranks})
    parts: list[str] = []
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        parts.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}" if j > i + 1 else f"{rs[i]},{rs[j]}")
        i = j + 1
    return "[" + ",".join(parts) + "]"


def group_values(by_rank: dict[int, Any], first: Any = (), bare: bool = False) -> str:
    """``{rank: text}`` as groups of ranks with the same text, ``first`` ranks' groups first, then the
    smaller groups: ``rank 3: all_reduce at a.py:9; 15 ranks [0-2,4-15]: barrier at a.py:20``.
    ``bare`` leaves the rank phrase out when every rank has the same text."""
    groups: dict[str, list[int]] = {}
    for r, text in sorted(by_rank.items()):
        groups.setdefault(str(text), []).append(r)
    if bare and len(groups) == 1:
        return next(iter(groups))
    lead = {int(r) for r in first}
    order = sorted(groups.items(), key=lambda kv: (not lead & set(kv[1]), len(kv[1]), kv[1][0]))
    return "; ".join(f"{ranks_phrase(rs)}: {text}" for text, rs in order)


def unseen_phrase(ranks: Any, gone: bool = False) -> str:
    """``rank 0 runs on another node`` / ``3 ranks [0-2] run on other nodes``, not visible here; ``gone``: the
    job ran on this one node, so the ranks' records are missing instead (rundir.records-missing)."""
    rs = sorted({int(r) for r in ranks})
    if gone:
        return f"{ranks_phrase(rs)} left no records here (rundir.records-missing)"
    if len(rs) == 1:
        return f"rank {rs[0]} runs on another node and is not visible here"
    return f"{ranks_phrase(rs)} run on other nodes and are not visible here"


def analyze_command(run_dir: str) -> str:
    """The ``ddpdoctor analyze`` command line that re-analyzes ``run_dir`` with the other nodes' run dirs."""
    return f"`ddpdoctor analyze {run_dir} OTHER_NODES_RUN_DIRS...`"


def ranks_phrase(ranks: Any) -> str:
    """``rank 3`` or ``4 ranks [0-3]``."""
    rs = sorted({int(r) for r in ranks})
    return f"rank {rs[0]}" if len(rs) == 1 else f"{len(rs)} ranks {rank_list(rs)}"


@dataclass(frozen=True)
class RankLine:
    """One rank's state as the report shows it."""

    rank: int
    state: str  # finished | crashed | waiting | busy | killed | unresponsive | not-started
    detail: str
    location: Location | None = None


@dataclass(frozen=True)
class AttemptLine:
    """One attempt of a job that torchrun restarted (--max-restarts), as the report lists it: its own
    verdict, exit code, culprits and summary (the first finding's message), and its finding ids."""

    attempt: int
    verdict: Verdict
    exit_code: int
    culprits: tuple[int, ...] = ()
    summary: str = ""
    findings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Report:
    command: str
    verdict: Verdict  # ok | findings | hang | crash | error
    exit_code: int
    run_dir: str
    findings: tuple[Finding, ...] = ()
    ranks: tuple[RankLine, ...] = ()
    summary: str = ""
    notes: tuple[str, ...] = ()
    figures: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)  # analysis/figures.py
    cost: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)  # analysis/cost.py
    attempts: tuple[AttemptLine, ...] = ()  # every attempt, oldest first, after elastic restarts (else empty)
