"""torch's own flight-recorder analyzer test cases (``FlightRecorderE2ETest``: hand-written entries there),
rebuilt as real gloo jobs (tests/frjobs/torchcases.py; records in tests/data/fr/gloo/torch-*). The matched
cases must read OK, with no finding at all: a false alarm on a healthy job is a defect too. Case 4 (a
completed coalesced broadcast of other shapes) is in test_nvrx_and_derived.py; case 6 is made real here as
an extra coalesced call that completes against the other rank's next call and shifts every call after it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddpdoctor.analysis.config import Config
from ddpdoctor.postmortem import inputs, report

DATA = Path(__file__).resolve().parents[2] / "data" / "fr" / "gloo"
LINES = json.loads((DATA / "torch-lines.json").read_text())


def _report(case: str):
    return report.build(inputs.load([str(DATA / f"torch-{case}")]), Config())


@pytest.mark.parametrize("case", ["matched", "coalesced", "broadcasts", "uneven-rs"])
def test_torchs_matched_cases_are_ok_with_no_finding(case):
    rep = _report(case)
    assert (rep.verdict, rep.exit_code) == ("ok", 0), [f.message for f in rep.findings]
    assert rep.findings == ()


def _lines(f, rank: int) -> set[int]:
    return {loc.line for loc in f.locations if loc.rank == rank}


@pytest.mark.parametrize("fmt", ["pickle", "json"])
def test_an_extra_coalesced_call_that_completed_against_the_next_call_is_the_culprits(fmt):
    """Rank 1 alone all-reduces two 2x4 tensors (coalesced); gloo completes it against rank 0's next
    all-reduce of one 4x4 (the same bytes), and rank 1's own next all-reduce waits for good. Rank 0, with
    nothing pending, is not behind: rank 1 made the extra call. Before, rank 0 was blamed as behind."""
    rep = report.build(
        inputs.load([str(DATA / ("torch-extra-coalesced" if fmt == "pickle" else "torch-extra-coalesced-json"))]),
        Config(),
    )
    assert (rep.verdict, rep.exit_code) == ("hang", 3)
    f = rep.findings[0]
    assert f.id == "hang.rank-conditional-collective" and f.culprits == (1,), f.message
    assert "rank 1 made an extra all_reduce([2x4,2x4]) (#2 of group 0)" in f.message
    assert "which rank 0 made already as #2" in f.message
    if fmt == "pickle":  # JSON dumps hold no stacks
        assert _lines(f, 1) == {LINES["EXTRA_COALESCED"], LINES["NEXT"]} and _lines(f, 0) == {LINES["NEXT"]}
    # the completed mismatch itself is named too (the wrong result before the hang)
    assert [g.id for g in rep.findings[1:]] == ["collective.shape-mismatch"]
