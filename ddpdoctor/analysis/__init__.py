"""Pure analysis: ``diagnose(record, config) -> Report``. No torch, no click, no subprocess.

The live monitor and ``ddpdoctor analyze`` call the same detectors (``analysis/registry.py``). The detectors
are imported on first use, so that ``ddpdoctor --help`` (which needs only the model) stays fast.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("diagnose", "rank_lines", "REGISTRY"):
        from ddpdoctor.analysis import registry as _d

        return getattr(_d, name)
    raise AttributeError(name)
