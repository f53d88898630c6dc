"""The launcher's timings (launch/timings.py): frozen, and a stop's settle time leaves room for the two
heartbeats it waits for."""

from __future__ import annotations

import dataclasses

import pytest

from ddpdoctor.launch.timings import Timings


def test_settle_leaves_two_heartbeats_and_the_timings_are_frozen() -> None:
    t = Timings()
    assert t.settle >= 2 * t.heartbeat and t.heartbeat > 0 and t.grace > 0 and t.dump_wait > 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.heartbeat = 1.0  # type: ignore[misc]
    assert Timings(heartbeat=0.1).heartbeat == 0.1
