"""The line that stores into a holder (rank/probes/memleak/storesite.py), found in a user module's source:
the ``.append`` in the holder's class over its plain ``self.x = []``, a module global's subscript store,
a local's ``+=``; and describe's record with the holder's path, whether it is a container and its owner."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from ddpdoctor.rank.probes.memleak.storesite import describe, store_site

SOURCE = """\
class Trainer:
    def __init__(self):
        self.history = []

    def fit(self, loss):
        self.history.append(loss)


CACHE = {}


def remember(k, v):
    CACHE[k] = v


def accumulate(xs):
    total = 0
    for x in xs:
        total += x
    return total
"""


@pytest.fixture
def mod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    path = tmp_path / "user_train_mod.py"
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location("user_train_mod", path)
    m = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "user_train_mod", m)
    spec.loader.exec_module(m)
    return m


def test_the_classs_append_is_preferred_to_its_plain_assignment(mod: Any) -> None:
    got = describe(("self.history[]", ("attr", "history"), ("class", mod.Trainer)), None)
    assert got == {
        "name": "self.history",
        "file": mod.__file__,
        "line": 6,
        "func": "fit",
        "path": "self.history",
        "container": True,
        "owner": "Trainer",
    }


def test_a_module_globals_subscript_store(mod: Any) -> None:
    site = store_site(("CACHE", ("name", "CACHE"), ("module", mod.__file__)), None)
    assert site == {"name": "CACHE", "file": mod.__file__, "line": 13, "func": "remember"}


def test_a_local_accumulated_with_plus_equals_is_a_variable_not_a_container(mod: Any) -> None:
    got = describe(("total", ("name", "total"), ("code", mod.accumulate.__code__)), None)
    assert (got["line"], got["func"], got["container"], got["name"]) == (19, "accumulate", False, "total")


def test_no_store_found_falls_back_to_the_scope_and_results_are_cached(mod: Any) -> None:
    cache: dict = {}
    holder = ("nowhere", ("name", "nowhere"), ("code", mod.remember.__code__))
    got = describe(holder, None, cache)
    assert got == {
        "name": "nowhere",
        "file": mod.__file__,
        "line": 12,
        "func": "remember",
        "path": "nowhere",
        "container": False,
    }
    assert describe(holder, None, cache) is got
