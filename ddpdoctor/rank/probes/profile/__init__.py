"""Probes for ``ddpdoctor profile``: step/phase/collective ranges and NVTX (``timeline``), DDP bucket ranges
(``buckets``) and the line sampler (``linesamples``)."""

from __future__ import annotations

from typing import Any


def install(probe: Any, settings: Any = None) -> Any:
    """Install the profile probe (``timeline.install``); imported on use so the package stays light."""
    from ddpdoctor.rank.probes.profile import timeline

    return timeline.install(probe, settings)
