"""rank.active: the one slot the wrappers read for this rank's probe. Empty (no probe installed), a wrapped
collective is the original call, untouched; so is one made while the probe is inside its own work (depth) or
from another thread than the probe's main one."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from ddpdoctor.rank import active, collectives


def _wrapped():
    calls = []

    def orig(*args, **kwargs):
        calls.append((args, kwargs))
        return "orig-result"

    return collectives._wrap("all_reduce", orig), calls


def test_no_probe_by_default():
    assert active.probe is None


def test_without_a_probe_a_wrapped_collective_is_the_original_call(monkeypatch):
    monkeypatch.setattr(active, "probe", None)
    wrapper, calls = _wrapped()
    assert wrapper(1, op="sum") == "orig-result"
    assert calls == [((1,), {"op": "sum"})]


def test_a_probe_busy_or_on_another_thread_passes_the_call_through(monkeypatch):
    wrapper, calls = _wrapped()
    # depth: the probe's own collective; no other attribute is touched, so a recording would fail here
    monkeypatch.setattr(active, "probe", SimpleNamespace(depth=1, main_ident=threading.get_ident()))
    assert wrapper(2) == "orig-result"
    monkeypatch.setattr(active, "probe", SimpleNamespace(depth=0, main_ident=-1))  # not this thread
    assert wrapper(3) == "orig-result"
    assert [a for a, _ in calls] == [(2,), (3,)]
