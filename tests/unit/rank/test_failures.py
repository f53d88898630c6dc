"""A probe failing inside a rank says so (rank/failures.py): one probe_error event per place with the
missing data, at most MAX_PLACES places, nothing without a probe, and a failing hook named by its probe's
family."""

from __future__ import annotations

from typing import Any

import fakeprobe
import pytest

from ddpdoctor.rank import failures
from ddpdoctor.rank.hooks import RankProbe
from ddpdoctor.record import schema


@pytest.fixture
def probe(tmp_path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(failures, "_said", set())
    p = fakeprobe.make_probe(tmp_path)
    yield p
    fakeprobe.close(p)


def _errors(p: Any) -> list[dict]:
    return fakeprobe.kinds(fakeprobe.records(p, schema.EVENTS), schema.K_PROBE_ERROR)


def test_each_place_is_reported_once_with_what_is_missing(probe: Any) -> None:
    for _ in range(3):
        failures.report(probe, "sampler wrapper", "the sampler records", KeyError("epoch"))
    failures.report(probe, "save wrapper", "the checkpoint records", OSError("disk full"))
    errs = _errors(probe)
    assert [(e["where"], e["error"], e["missing"]) for e in errs] == [
        ("sampler wrapper", "KeyError: 'epoch'", "the sampler records"),
        ("save wrapper", "OSError: disk full", "the checkpoint records"),
    ]


def test_at_most_max_places_and_nothing_without_a_probe(probe: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(failures, "MAX_PLACES", 2)
    failures.report(None, "x", "y", ValueError())
    for i in range(5):
        failures.report(probe, f"place {i}", "data", ValueError(str(i)))
    assert [e["where"] for e in _errors(probe)] == ["place 0", "place 1"]


def test_a_failing_hook_is_named_by_its_probes_family(probe: Any) -> None:
    class Census(RankProbe):
        family = "memleak"
        records = "the censuses after step 4"

        def on_tick(self) -> None:
            raise MemoryError

    failures.hook_failed(probe, Census().on_tick, MemoryError())
    (e,) = _errors(probe)
    assert e["where"] == "memleak probe (on_tick)" and e["missing"] == "the censuses after step 4"
