"""A probe that fails inside a rank says so: one ``probe_error`` event per place (``where``), naming the data
the report now misses, so that a report is never clean-looking with a hole in it (the analysis turns the
events into ``probe.internal-error``). A probe bug never reaches the user's script: every caller goes on
after reporting.

Kept to a few bounded writes: a hook that fails on every step writes once, and at most ``MAX_PLACES``
places are reported per rank.
"""

from __future__ import annotations

from typing import Any

from ddpdoctor.record import schema

MAX_PLACES = 16
_said: set[str] = set()


def report(p: Any, where: str, missing: str, exc: BaseException) -> None:
    """Record once per ``where`` that ddpdoctor's ``where`` failed with ``exc`` and what data is missing."""
    if where in _said or len(_said) >= MAX_PLACES or p is None:
        return
    _said.add(where)
    try:
        p.events.write(
            schema.K_PROBE_ERROR, p.rank, where=where, missing=missing, error=f"{type(exc).__name__}: {str(exc)[:300]}"
        )
    except Exception:  # the events file itself failed: there is nowhere left to say it
        pass


def hook_failed(p: Any, hook: Any, exc: BaseException) -> None:
    """A rank probe's hook (``rank/hooks.py``) raised: name the probe's family and what it records."""
    probe = getattr(hook, "__self__", None)
    family = getattr(probe, "family", None) or type(probe).__name__
    name = getattr(hook, "__name__", "hook")
    report(p, f"{family} probe ({name})", getattr(probe, "records", "") or f"the {family} records", exc)
