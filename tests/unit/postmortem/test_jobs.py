"""Dumps that do not belong together are said to be so: two jobs' dumps in one folder (tests/data/fr/gloo/
two-jobs: a job that hung on rank 1's extra call, and a healthy one 93 s later, real gloo jobs of
tests/frjobs/frjob.py) are two jobs, each judged on its own dumps. Before, one rank's two dumps were read as
duplicates, the larger ring kept, and the folder read OK: the healthy job hid the hang."""

from __future__ import annotations

import shutil
from pathlib import Path

from ddpdoctor.analysis.config import Config
from ddpdoctor.postmortem import inputs, report

DATA = Path(__file__).resolve().parents[2] / "data" / "fr" / "gloo"


def test_two_jobs_in_one_folder_are_judged_apart():
    inp = inputs.load([str(DATA / "two-jobs")])
    parts = inputs.jobs(inp)
    assert [sorted(p.dumps) for p in parts] == [[0, 1], [0, 1]]
    assert [{Path(d.path).name[:4] for d in p.dumps.values()} for p in parts] == [{"joba"}, {"jobb"}]
    rep = report.build(inp, Config())
    assert (rep.verdict, rep.exit_code) == ("hang", 3)
    (f,) = [f for f in rep.findings if f.severity == "error"]
    assert f.id == "hang.rank-conditional-collective" and f.culprits == (1,)
    assert f.message.startswith("job 1 (joba_rank_0..")
    assert any("come from 2 jobs" in n and " s apart" in n for n in rep.notes)
    assert any(n.startswith("job 2 (jobb_rank_0..") and "no error" in n for n in rep.notes)


def test_one_jobs_pickle_and_json_dumps_stay_one_job(tmp_path):
    # the same records twice (the helper job's dumps under two names): overlapping times, one job
    for r in (0, 1):
        shutil.copy(DATA / "helper" / f"rank_{r}", tmp_path / f"rank_{r}")
        shutil.copy(DATA / "helper" / f"rank_{r}", tmp_path / f"copy_rank_{r}")
    inp = inputs.load([str(tmp_path)])
    assert len(inputs.jobs(inp)) == 1
    assert "job 1" not in report.build(inp, Config()).findings[0].message


def test_a_rank_only_in_one_of_two_far_apart_spans_is_not_a_second_job(tmp_path):
    # two dumps far apart in time but of different ranks (a ring that ran on without a stalled rank): one job
    shutil.copy(DATA / "busy" / "rank_0", tmp_path / "rank_0")
    shutil.copy(DATA / "helper" / "rank_1", tmp_path / "rank_1")
    assert len(inputs.jobs(inputs.load([str(tmp_path)]))) == 1
