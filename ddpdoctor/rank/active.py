"""The probe of this rank, once installed: read by the wrappers (collectives, DDP.forward) on every call.

A module of its own so that ``probe.py``, ``wrappers.py`` and ``collectives.py`` need not import each other.
"""

from __future__ import annotations

from typing import Any

probe: Any = None  # ddpdoctor.rank.probe.Probe, set by wrappers.install
