"""NVML handles per rank (rank/nvml.py), with a stand-in pynvml: NVML initialised once, each device's
handle looked up once and kept, and a missing NVML raising for the caller to catch."""

from __future__ import annotations

import sys
import types

import pytest

from ddpdoctor.rank import nvml


def test_nvml_is_initialised_once_and_handles_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    fake = types.ModuleType("pynvml")
    fake.nvmlInit = lambda: calls.append("init")  # type: ignore[attr-defined]
    fake.nvmlDeviceGetHandleByIndex = lambda i: calls.append(f"handle {i}") or f"h{i}"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(nvml, "_handles", {})
    assert nvml.handle(0) == "h0" and nvml.handle(1) == "h1" and nvml.handle(0) == "h0"
    assert calls == ["init", "handle 0", "handle 1"]


def test_a_missing_nvml_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    monkeypatch.setattr(nvml, "_handles", {})
    with pytest.raises(ImportError):
        nvml.handle(0)
