"""Who holds what grew, searched upwards from the grown objects (rank/probes/memleak/referrers.py): an
attribute of an instance (through a list), a module global, a closure variable and a default argument are
named as the user's code writes them, the caller's own containers are never holders, and ``resolve`` reads
a holder's current value back from its owner."""

from __future__ import annotations

import sys
import types
import weakref
from typing import Any

import pytest

from ddpdoctor.rank.probes.memleak.referrers import find, resolve


class Blob:
    """Stands in for a kept tensor or graph root."""


class Trainer:
    def __init__(self) -> None:
        self.history: list[Blob] = []
        self.lr = 0.1


def test_an_instance_attribute_holding_a_list_is_named_self_attr() -> None:
    trainer = Trainer()
    trainer.history += [Blob(), Blob()]
    target = trainer.history[1]
    got = find([target])
    holder, owner = got[id(target)]
    assert holder == ("self.history[]", ("attr", "history"), ("class", Trainer)) and owner is trainer
    assert resolve(weakref.ref(trainer), ("attr", "history")) is trainer.history


@pytest.fixture
def user_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    mod = types.ModuleType("fake_user_train")
    mod.__file__ = "/work/fake_user_train.py"
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    return mod


def test_a_module_global_is_named_by_its_name(user_module: types.ModuleType) -> None:
    user_module.CACHE = {"step 3": Blob()}  # type: ignore[attr-defined]
    got = find([user_module.CACHE["step 3"]])  # type: ignore[attr-defined]
    ((holder, owner),) = got.values()
    assert holder == ("CACHE[]", ("name", "CACHE"), ("module", "/work/fake_user_train.py"))
    assert owner is vars(user_module) and resolve(owner, ("name", "CACHE")) is user_module.CACHE  # type: ignore[attr-defined]


def _closure() -> Any:
    kept = [Blob()]

    def step() -> list:
        return kept

    return step


def _defaults(seen: list = [Blob()]) -> list:  # noqa: B006 - the leak under test
    return seen


def test_closure_variables_and_default_arguments_are_named() -> None:
    step = _closure()
    target = step()[0]
    ((holder, owner),) = find([target]).values()
    assert holder[:2] == ("kept[]", ("name", "kept")) and owner is step
    assert resolve(weakref.ref(step), ("name", "kept")) is step()
    target = _defaults.__defaults__[0][0]  # type: ignore[index]
    ((holder, owner),) = find([target]).values()
    assert holder[:2] == ("seen[]", ("name", "seen")) and owner is _defaults
    assert resolve(weakref.ref(_defaults), ("name", "seen")) is _defaults.__defaults__[0]  # type: ignore[index]


def test_the_callers_own_container_is_kept_out_and_nothing_is_found_for_nothing() -> None:
    mine = [Blob()]
    assert find([mine[0]], keep_out={id(mine)}) == {}
    assert find([]) == {}
    gone = weakref.ref(Trainer())
    assert resolve(gone, ("attr", "history")) is None  # the owner was collected


def test_a_busy_host_does_not_cut_the_search_short(monkeypatch: pytest.MonkeyPatch) -> None:
    """The search's cap is the thread's CPU time: a wall clock that leaps (the rank preempted by other
    processes on a busy host) must not end it before the holder is named."""
    import itertools

    from ddpdoctor.rank.probes.memleak import referrers

    leaps = itertools.count(0, 10.0)  # every read of the wall clock is 10 s later than the one before
    monkeypatch.setattr(referrers.time, "perf_counter", lambda: next(leaps))
    monkeypatch.setattr(referrers.time, "monotonic", lambda: next(leaps))
    trainer = Trainer()
    trainer.history += [Blob()]
    holder, owner = find([trainer.history[0]])[id(trainer.history[0])]
    assert holder[0] == "self.history[]" and owner is trainer


def test_stats_say_when_the_cpu_cap_cut_the_search(monkeypatch: pytest.MonkeyPatch) -> None:
    from ddpdoctor.rank.probes.memleak import referrers

    trainer = Trainer()
    trainer.history += [Blob()]
    stats: dict[str, Any] = {}
    assert find([trainer.history[0]], stats=stats) and not stats.get("capped")
    monkeypatch.setattr(referrers, "TIME_CAP_S", -1.0)
    assert find([trainer.history[0]], stats=stats) == {} and stats["capped"] is True
