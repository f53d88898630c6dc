"""The rank-probe protocol (rank/hooks.py): only the hooks a probe overrides are bound, after_* hooks in
reverse order, and install_all installs what the manifest names, reporting a probe that fails to install
while the others still run."""

from __future__ import annotations

import sys
import types
from typing import Any

import fakeprobe
import pytest

from ddpdoctor.rank import failures, hooks
from ddpdoctor.rank.hooks import RankProbe, bound, install_all
from ddpdoctor.record import schema


class A(RankProbe):
    def on_forward(self, model: Any) -> None: ...

    def after_forward(self, model: Any) -> None: ...


class B(RankProbe):
    def after_forward(self, model: Any) -> None: ...


def test_only_overridden_hooks_are_bound_and_after_hooks_run_in_reverse() -> None:
    a, b = A(), B()
    assert bound([a, b], "on_forward") == (a.on_forward,)
    assert bound([a, b], "after_forward") == (b.after_forward, a.after_forward)
    assert bound([a, b], "on_tick") == ()


def test_install_all_installs_the_named_probes_and_reports_one_that_fails(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good, bad = types.ModuleType("good_probe"), types.ModuleType("bad_probe")
    good.install = lambda probe, settings: A() if settings == {"every": 5} else None  # type: ignore[attr-defined]

    def explode(probe: Any, settings: Any) -> None:
        raise ImportError("no module named nvtx")

    bad.install = explode  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "good_probe", good)
    monkeypatch.setitem(sys.modules, "bad_probe", bad)
    monkeypatch.setattr(hooks, "REGISTRY", {"check": "good_probe", "profile": "bad_probe", "memleak": "good_probe"})
    monkeypatch.setattr(failures, "_said", set())
    p = fakeprobe.make_probe(tmp_path)
    try:
        got = install_all(p, {"check": {"every": 5}, "profile": {"nsys": False}, "memleak": None})
        assert len(got) == 1 and isinstance(got[0], A)  # memleak not asked for
        (e,) = fakeprobe.kinds(fakeprobe.records(p, schema.EVENTS), schema.K_PROBE_ERROR)
        assert e["where"] == "profile probe (install)" and e["error"] == "ImportError: no module named nvtx"
    finally:
        fakeprobe.close(p)
