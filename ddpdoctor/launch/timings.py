"""The launcher's timings: how often ranks beat, how long the monitor waits for stack dumps and for a
process tree to end after TERM. Not thresholds of the analysis (those are :class:`Config`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Timings:
    heartbeat: float = 0.25  # rank heartbeat period (seconds)
    grace: float = 3.0  # TERM -> KILL grace when ending the process tree
    dump_wait: float = 3.0  # how long the monitor waits for stack dumps after a verdict
    # ... and for the flight records the ranks write with their stacks (a few ms; a rank whose dump is slow, as
    # when torch's symbolizer imports torch._inductor where rank/flight.py cannot keep it from it, gets this long)
    flight_wait: float = 8.0
    settle: float = 1.5  # --steps / --epochs reached: how long the ranks get to write two more beats
