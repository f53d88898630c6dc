"""postmortem.report: the verdict and exit code of a post-mortem by the rules of ``analysis.diagnose`` (hang
before crash before other errors; ``--fail-on``), ``--select``/``--ignore`` on its findings, and the merge with
a run directory's report; on the dumps of a real gloo job (tests/data/fr/gloo) and hand-made findings. Pure."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, RankLine, Report
from ddpdoctor.analysis.registry import verdict_of
from ddpdoctor.errors import ExitCode
from ddpdoctor.postmortem import inputs, report

DATA = Path(__file__).resolve().parents[2] / "data" / "fr" / "gloo"


def _f(fid: str, severity: str = "error", **evidence) -> Finding:
    return Finding(fid, severity, f"{fid} happened", evidence=evidence)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "findings, fail_on, want",
    [
        ([], "error", ("ok", ExitCode.OK)),
        ([_f("crash.exception"), _f("hang.timeout")], "error", ("hang", ExitCode.HANG)),
        ([_f("postmortem.no-dump", waiting=[0, 1])], "error", ("hang", ExitCode.HANG)),  # the others wait for it
        ([_f("postmortem.no-dump")], "error", ("crash", ExitCode.FINDINGS)),
        ([_f("crash.exception"), _f("data.shard-overlap")], "error", ("crash", ExitCode.FINDINGS)),
        ([_f("data.shard-overlap")], "error", ("findings", ExitCode.FINDINGS)),
        ([_f("postmortem.mixed-dumps", "warning")], "error", ("ok", ExitCode.OK)),
        ([_f("postmortem.mixed-dumps", "warning")], "warning", ("ok", ExitCode.FINDINGS)),
        ([_f("seed.identical-streams", "note")], "warning", ("ok", ExitCode.OK)),
        ([_f("seed.identical-streams", "note")], "note", ("ok", ExitCode.FINDINGS)),
    ],
)
def test_verdict_and_exit_code(findings, fail_on, want):
    assert verdict_of(findings, fail_on) == want


def test_one_conclusion_and_the_catalog_the_only_verdict_source():
    """One verdict order and one way to a Report (issue 34: the order was written three times, and the
    post-mortem's contradicted the catalog on the ids it does not emit itself, e.g. run.failed-before-init read
    "findings", exit 1, not 4). The one fact of the evidence a verdict depends on, ranks that wait for a rank
    without a dump, is a field of the catalog's entry, not a rule of the post-mortem's."""
    from ddpdoctor.analysis.catalog import CATALOG

    assert [fid for fid, e in CATALOG.items() if e.waited] == ["postmortem.no-dump"]
    assert verdict_of([_f("run.failed-before-init")], "error") == ("error", ExitCode.NOT_RUN)
    rep = report.build(inputs.load([str(DATA / "kill")]), Config())
    assert (rep.verdict, rep.exit_code) == verdict_of(list(rep.findings), "error")


def test_merge_takes_the_catalogs_order_of_verdicts():
    could_not = _rep("error", ExitCode.USAGE, [_f("run.no-distributed")])
    hang = _rep("hang", ExitCode.HANG, [_f("hang.timeout")])
    assert (report.merge(hang, could_not).verdict, report.merge(hang, could_not).exit_code) == ("error", 2)
    failing_ok = _rep("ok", ExitCode.FINDINGS, [_f("seed.identical-streams", "note")])
    assert report.merge(_rep("ok", ExitCode.OK), failing_ok).exit_code == ExitCode.FINDINGS


def test_the_post_mortem_of_a_real_hang():
    path = str(DATA / "p2p")
    rep = report.build(inputs.load([path]), Config())
    assert (rep.command, rep.verdict, rep.exit_code, rep.run_dir) == ("analyze", "hang", ExitCode.HANG, path)
    assert rep.findings[0].id == "hang.timeout" and rep.summary == rep.findings[0].message
    sev = [f.severity for f in rep.findings]
    assert sev == sorted(sev, key=["error", "warning", "note"].index)  # the most severe first


def test_ignore_leaves_the_hang_out_the_verdict_follows_and_a_note_says_so():
    rep = report.build(inputs.load([str(DATA / "p2p")]), Config(ignore=("hang",)))
    assert not [f for f in rep.findings if f.id.startswith("hang.")]
    assert rep.verdict != "hang" and rep.exit_code != ExitCode.HANG
    assert any(n.startswith("left out by --select/--ignore: ") and "hang.timeout" in n for n in rep.notes)


def _rep(verdict, code, findings=(), ranks=(), summary="s", notes=()) -> Report:
    return Report("analyze", verdict, code, f"dir-{verdict}", tuple(findings), tuple(ranks), summary, tuple(notes))


def test_merge_keeps_the_worse_verdict_and_a_hangs_exit_code():
    a = _rep("findings", ExitCode.FINDINGS, [_f("data.shard-overlap")], [RankLine(0, "finished", "")], "a", ["na"])
    b = _rep("hang", ExitCode.HANG, [_f("hang.timeout")], [RankLine(0, "waiting", ""), RankLine(1, "waiting", "")])
    m = report.merge(a, b)
    assert (m.verdict, m.exit_code, m.run_dir) == ("hang", ExitCode.HANG, "dir-findings, dir-hang")
    assert [f.id for f in m.findings] == ["data.shard-overlap", "hang.timeout"]
    assert [(r.rank, r.state) for r in m.ranks] == [(0, "finished"), (1, "waiting")]  # the run's own line first
    assert m.summary == "a" and m.notes == ("na",)


def test_merge_of_a_healthy_run_with_a_post_mortem_takes_its_summary():
    a = _rep("ok", ExitCode.OK, summary="healthy: no findings")
    b = _rep("crash", ExitCode.FINDINGS, [_f("crash.exception")], summary="rank 1 raised")
    m = report.merge(a, b)
    assert (m.verdict, m.exit_code, m.summary) == ("crash", ExitCode.FINDINGS, "rank 1 raised")
