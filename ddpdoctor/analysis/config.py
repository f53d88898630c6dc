"""The thresholds of the analysis, one frozen dataclass the CLI maps options onto. Pure. (The launcher's
timings, heartbeat period and grace periods, are :class:`ddpdoctor.launch.timings.Timings`.)"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    """Thresholds for detection; the CLI maps options onto it."""

    timeout: float = 60.0  # an uncertain wait becomes a hang after this many seconds
    settle: float = 1.0  # a mismatch must hold this long before it is called certain
    stale: float = 3.0  # a rank whose heartbeat is older than this is unresponsive
    fail_on: str = "error"  # lowest severity that makes the exit code non-zero
    select: tuple[str, ...] = ()  # ids or families to report (none: all); catalog.selected
    ignore: tuple[str, ...] = ()  # ids or families left out
