"""NVML, set up once per rank for the probes that read the GPU (memory, utilisation)."""

from __future__ import annotations

from typing import Any

_handles: dict[int, Any] = {}


def handle(dev: int) -> Any:
    """The NVML handle of CUDA device ``dev`` (raises when NVML is missing: callers catch)."""
    h = _handles.get(dev)
    if h is None:
        import pynvml

        if not _handles:
            pynvml.nvmlInit()
        h = _handles[dev] = pynvml.nvmlDeviceGetHandleByIndex(dev)
    return h
