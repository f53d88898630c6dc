"""A bounded cache (probes/plateau.py: 40 entries of 256x256, filled in the first 40 steps of 120) judged from
a real run's records taken on a loaded host (tests/golden/plateau_loaded: loaded e2e run 1 of stop 45, where it
read ``memleak.tensors``, "grow by 108 KiB per step"). CPU contention made each census dear, so the budget
left two censuses on the plateau (steps 64 and 110) after six on the rise (1, 2, 4, ... 32): with so few
points the "later half" was the whole series, and the dense rise outweighed the plateau."""

from __future__ import annotations

import json
from pathlib import Path

from ddpdoctor.analysis import diagnose
from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.series import growth
from ddpdoctor.record.reader import load_run

GOLDEN = Path(__file__).resolve().parents[3] / "golden" / "plateau_loaded"


def _census_steps(rank: int) -> list[int]:
    lines = (GOLDEN / "ranks" / str(rank) / "memory.jsonl").read_text().splitlines()
    return [json.loads(x)["step"] for x in lines if '"kind":"census"' in x and '"final":true' not in x]


def test_the_premise_few_censuses_on_the_plateau():
    assert _census_steps(0) == [1, 2, 4, 8, 16, 32, 64, 110]


def test_a_cache_that_filled_and_stays_full_is_no_leak_however_few_censuses_saw_its_plateau():
    rep = diagnose(load_run(str(GOLDEN)), Config())
    errors = [(f.id, f.message) for f in rep.findings if f.severity == "error"]
    assert errors == [] and (rep.verdict, rep.exit_code) == ("ok", 0), errors


def test_the_flat_end_of_a_series_is_measured_in_steps():
    # the cache's entries per census on rank 0: a rise, then 46 steps at one value; after the warm-up
    # (the first three points) the series spans steps 8 to 110
    pts = [(1, 1.0), (2, 2.0), (4, 4.0), (8, 8.0), (16, 16.0), (32, 32.0), (64, 40.0), (110, 40.0)]
    g = growth(pts)
    assert g is not None and round(g["flat_tail"], 2) == round(46 / 102, 2)
    rising = growth([(s, float(s)) for s in (1, 2, 4, 8, 16, 32, 64, 110)])
    assert rising is not None and rising["flat_tail"] == 0.0
