"""Every process group judged: a 2-D device mesh of four gloo ranks (tests/frjobs/meshjob.py: tp groups
{0,1}, {2,3}; dp groups {0,2}, {1,3}), with one rank's call on one group more or fewer. Each group alone shows
only a rank behind and the waits are a cycle across groups; the report must name the rank, the group (by its
mesh dimension where the records carry it) and the line, live (under ddpdoctor) and from the job's own
flight-recorder dumps (plain torchrun), pickle and JSON alike: the culprit never depends on the frames only
the pickle carries. Four-rank jobs: the ``extended`` tier."""

from __future__ import annotations

from pathlib import Path

import pytest
from frjobs.jobs import MESH_JOB, dumped, run_job
from helpers import ddpdoctor, finding, lines_of, marker_line

pytestmark = [pytest.mark.extended, pytest.mark.xdist_group("mesh-jobs")]

FAULTS = {
    # case: (the culprit, the marker of its extra or skipped call, the mesh dimension of that call's group)
    "tp-extra": (3, "EXTRA", "tp"),
    "dp-skip": (1, "GRADS", "dp"),
}


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each fault's job under plain torchrun, every rank dumped by its watchdog."""
    out = {}
    for case in FAULTS:
        for attempt in range(2):  # the dumps race the agent's end of the job: one rerun on a lost race
            d = run_job(case, tmp_path_factory.mktemp(f"{case}-{attempt}"), job=MESH_JOB, nproc=4)
            if dumped(d) == {0, 1, 2, 3}:
                break
        assert dumped(d) == {0, 1, 2, 3}, (case, dumped(d), (d / "torchrun.log").read_text()[-2000:])
        out[case] = d
    return out


def _assert_culprit(report: dict, case: str, with_lines: bool, dim: str | None) -> dict:
    culprit, marker, want_dim = FAULTS[case]
    assert report["verdict"] == "hang"
    f = finding(report, "hang.rank-conditional-collective")
    assert f["culprits"] == [culprit], f["message"]
    victims = {l["rank"] for l in f["locations"] if l["role"] == "victim"}
    assert culprit not in victims
    if with_lines:
        assert lines_of(f, culprit) & {marker_line(MESH_JOB, marker)}, f["locations"]
        assert victims == {0, 1, 2, 3} - {culprit}
    if dim:
        assert f"group {want_dim} (" in f["message"], f["message"]
    return f


@pytest.mark.parametrize("case", sorted(FAULTS))
def test_live_names_the_rank_group_and_line(case, tmp_path):
    res = ddpdoctor(
        ["hang", "--nproc-per-node", "4", str(MESH_JOB), case],
        tmp_path,
        timeout=180,
        env={"FRJOB_STALL": "600"},  # the job's own watchdog stays out of the way: ddpdoctor proves the deadlock
    )
    assert res.code == 3, res.err + res.out
    f = _assert_culprit(res.report, case, with_lines=True, dim=None)
    assert "skipped" in f["message"] if case == "dp-skip" else "more" in f["message"]


@pytest.mark.parametrize("fmt", ["fr", "json"])
@pytest.mark.parametrize("case", sorted(FAULTS))
def test_own_dumps_name_the_rank_group_and_line(dumps, case, fmt, tmp_path):
    res = ddpdoctor(["analyze", str(dumps[case] / fmt)], tmp_path)
    assert res.code == 3, res.err + res.out
    _assert_culprit(res.report, case, with_lines=fmt == "fr", dim="tp" if case == "tp-extra" else "dp")
