"""The downward walk from the user's names to the tensors they keep (rank/probes/memleak/holders.py),
in-process from this test's own frame: a tensor kept in an instance's list is held by ``keeper.history[]``,
a local tensor by its name, a tensor in a module function's default list by that default; a cap on visits
is kept."""

from __future__ import annotations

import sys
from typing import Any

import torch

from ddpdoctor.rank.probes.memleak.holders import walk


def _log(x: Any, seen: list = [torch.ones(7)]) -> list:  # noqa: B006 - the leak under test
    return seen


class Keeper:
    def __init__(self) -> None:
        self.history: list[torch.Tensor] = []
        self.steps = 0


def _found(frame: Any, **kw: Any) -> dict[int, tuple[str | None, str]]:
    out: dict[int, tuple[str | None, str]] = {}

    def on_tensor(t: Any, holder: Any, path: str) -> None:
        out[t.numel()] = (holder[0] if holder else None, path)

    walk(frame, on_tensor, (torch.Tensor,), **kw)
    return out


def test_each_kept_tensor_is_reached_with_the_name_that_holds_it() -> None:
    keeper = Keeper()
    keeper.history += [torch.ones(2), torch.ones(3)]
    loss_sum = torch.zeros(5)
    found = _found(sys._getframe())
    assert found[2] == ("keeper.history[]", "keeper.history[]") and found[3][0] == "keeper.history[]"
    assert found[5] == ("loss_sum", "loss_sum")
    assert found[7] == ("_log.<default>.seen[]", "_log.<default>.seen[]")
    del keeper, loss_sum


def test_the_walk_stops_at_its_visit_cap() -> None:
    many = [object() for _ in range(100)]  # noqa: F841 - a root of the walk
    assert walk(sys._getframe(), lambda *a: None, (torch.Tensor,), max_visits=10) == 10
