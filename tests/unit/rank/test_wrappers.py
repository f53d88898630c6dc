"""The wrappers a rank installs (rank/wrappers.py), each built in-process around a stand-in original on a
fake rank-0 probe (tests/fakeprobe.py), never installed on torch itself: wrapping once, DDP.forward
counting forwards and running the probes' hooks (a failing hook reported, never raised), join and
DataLoader iteration recorded with the user's line, init_process_group's record, and the rebinding of
names imported before the wrappers."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import fakeprobe
import pytest
from torch.utils.data import DataLoader

from ddpdoctor.rank import active, failures, hooks, wrappers
from ddpdoctor.record import schema


@pytest.fixture
def probe(tmp_path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    p = fakeprobe.make_probe(tmp_path)
    monkeypatch.setattr(active, "probe", p)
    monkeypatch.setattr(failures, "_said", set())
    yield p
    fakeprobe.close(p)


def _events(p: Any, *kind: str) -> list[dict]:
    return fakeprobe.kinds(fakeprobe.records(p, schema.EVENTS), *kind)


def test_wrap_once_keeps_the_original_and_does_not_wrap_twice() -> None:
    class Owner:
        def step(self) -> str:
            """Take a step."""
            return "orig"

    orig = Owner.step
    hooks.wrap_once(Owner, "step", lambda f: lambda self: "wrapped:" + f(self))
    first = Owner.step
    hooks.wrap_once(Owner, "step", lambda f: lambda self: "again:" + f(self))
    assert Owner.step is first and Owner().step() == "wrapped:orig"
    assert first.__ddpdoctor_wrapped__ is orig and first.__name__ == "step" and first.__doc__ == "Take a step."


class Model:
    """A stand-in for the DDP module (weak-referenceable, as a module is)."""


class Hooks:
    family = "test"
    records = "the test records"

    def __init__(self, fail: bool = False) -> None:
        self.seen: list[tuple[str, bool]] = []
        self.fail = fail

    def on_forward(self, model: Any) -> None:
        self.seen.append(("before", active.probe.in_ddp_fwd))
        if self.fail:
            raise ValueError("hook bug")

    def after_forward(self, model: Any) -> None:
        self.seen.append(("after", active.probe.in_ddp_fwd))


def test_ddp_forward_counts_and_runs_the_hooks_around_the_call(probe: Any) -> None:
    h = Hooks()
    probe.fwd_before, probe.fwd_after = (h.on_forward,), (h.after_forward,)
    inside: list[bool] = []
    fwd = wrappers._ddp_forward(lambda self, x: inside.append(active.probe.in_ddp_fwd) or x * 2)
    model = Model()
    assert fwd(model, 3) == 6 and fwd(model, 4) == 8
    assert probe.ddp_fwd == 2 and inside == [True, True] and not probe.in_ddp_fwd
    assert h.seen == [("before", False), ("after", False)] * 2
    assert model in probe.ddp_models


def test_a_failing_hook_is_reported_once_and_the_forward_still_runs(probe: Any) -> None:
    h = Hooks(fail=True)
    probe.fwd_before = (h.on_forward,)
    fwd = wrappers._ddp_forward(lambda self: "out")
    assert fwd(Model()) == "out" and fwd(Model()) == "out"
    (err,) = _events(probe, schema.K_PROBE_ERROR)
    assert err["where"] == "test probe (on_forward)" and err["error"] == "ValueError: hook bug"
    assert err["missing"] == "the test records"


def test_without_a_probe_the_forward_is_the_plain_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(active, "probe", None)
    assert wrappers._ddp_forward(lambda self, x: x + 1)(object(), 1) == 2


def test_join_and_dataloader_iteration_are_recorded_with_the_users_line(probe: Any) -> None:
    join = wrappers._ddp_join_hook(lambda self, **kw: ("hook", kw))
    assert join(object(), divide_by_initial_world_size=True) == ("hook", {"divide_by_initial_world_size": True})
    line = sys._getframe().f_lineno - 1
    it = wrappers._dataloader_iter(lambda self: iter(["batch"]))
    loader = DataLoader(list(range(10)), batch_size=4, shuffle=True)
    assert list(it(loader)) == ["batch"]
    (j,) = _events(probe, schema.K_JOIN)
    assert j["site"][0] == __file__ and j["site"][1] == line
    (d,) = _events(probe, schema.K_DATALOADER)
    assert d["len"] == 3 and d["sampler"] == "RandomSampler" and d["site"][0] == __file__


def test_init_process_group_records_the_world_and_the_frameworks(probe: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    pg = types.SimpleNamespace(group_name="pg0")
    fake_dist = types.SimpleNamespace(
        distributed_c10d=types.SimpleNamespace(_get_default_group=lambda: pg),
        get_rank=lambda: 0,
        get_world_size=lambda: 4,
        get_backend=lambda: "gloo",
    )
    monkeypatch.setitem(sys.modules, "accelerate", types.ModuleType("accelerate"))
    init = wrappers._init_process_group(lambda *a, **kw: "inited", fake_dist)
    assert init("gloo", rank=0) == "inited"
    (e,) = _events(probe, schema.K_INIT)
    assert (e["global_rank"], e["world_size"], e["backend"]) == (0, 4, "gloo")
    assert "accelerate" in e["frameworks"] and probe.groups["pg0"] is pg


def test_names_imported_before_the_wrappers_are_pointed_at_them() -> None:
    def all_reduce(t: Any) -> str:
        return "orig"

    def wrapped(t: Any) -> str:
        return "wrapped"

    wrapped.__ddpdoctor_wrapped__ = all_reduce  # type: ignore[attr-defined]
    fake_dist = types.ModuleType("fake_dist")
    fake_dist.all_reduce = wrapped  # type: ignore[attr-defined]
    user_globals = {"all_reduce": all_reduce, "other": len}
    wrappers.rebind_user_imports(fake_dist, (user_globals,))
    assert user_globals["all_reduce"] is wrapped and user_globals["other"] is len


def test_traced_by_dynamo_the_forward_is_ddps_own_and_reads_no_probe(
    probe: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While dynamo traces the call (torch.compile(ddp_model) inlines DDP.forward), the wrapper is the plain
    call: no count, no hook, no cost site touched (a read of the probe would be a guard: a recompile a step)."""
    import torch.compiler

    h = Hooks()
    probe.fwd_before, probe.fwd_after = (h.on_forward,), (h.after_forward,)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    fwd = wrappers._ddp_forward(lambda self, x: x * 2)
    assert fwd(Model(), 3) == 6
    assert probe.ddp_fwd == 0 and h.seen == [] and probe.cost_forward.calls == 0
