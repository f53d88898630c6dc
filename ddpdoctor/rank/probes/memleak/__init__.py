"""Probes for ``ddpdoctor memleak``: per-step memory (``sampler``), censuses of live tensors and graphs
(``census``), who holds them (``holders``) and the line that stores into the holder (``storesite``)."""

from __future__ import annotations

from typing import Any


def install(probe: Any, settings: Any = None) -> Any:
    """Install the memleak probe (``sampler.install``); imported on use so the package stays light."""
    from ddpdoctor.rank.probes.memleak import sampler

    return sampler.install(probe, settings)
