"""`ddpdoctor analyze` on real gloo jobs under plain torchrun (tests/frjobs/frjob.py) where one rank is
behind: it stalls in its data-reading helper with nothing pending while the other waits in collective #4,
once after a send/recv (gloo counts the p2p op in the op id its pg_status reports, and records no entry)."""

from __future__ import annotations

from pathlib import Path

import pytest
from frjobs.jobs import JOB, dumped, run_job
from helpers import ddpdoctor, finding, lines_of, marker_line

# one worker runs the module fixture's jobs once; the extended tier since stop 57 (its fixture took 14.5 s)
pytestmark = [pytest.mark.xdist_group("postmortem-behind"), pytest.mark.extended]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for case in ("busy", "p2p"):
        d = run_job(case, tmp_path_factory.mktemp(case))
        # both ranks' watchdogs dump after 1 s without progress: no race with the agent here
        assert dumped(d) == {0, 1}, (case, (d / "torchrun.log").read_text()[-2000:])
        out[case] = d
    return out


@pytest.mark.parametrize("case", ["busy", "p2p"])
def test_the_rank_behind_is_the_culprit(jobs, tmp_path, case):
    res = ddpdoctor(["analyze", str(jobs[case] / "fr")], tmp_path)
    assert res.code == 3, res.err + res.out
    f = finding(res.report, "hang.timeout")
    assert f["culprits"] == [1]
    assert "rank 0 waits for rank 1" in f["message"] and "#4 of group 0" in f["message"]
    assert lines_of(f, 0) == {marker_line(JOB, "REGULAR")}
    rank1 = next(r for r in res.report["ranks"] if r["rank"] == 1)
    assert rank1["state"] == "busy"
