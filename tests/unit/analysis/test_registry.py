"""The verdict and exit code (analysis/registry.py): no error is OK (exit 0, or 1 with --fail-on), a hang
outranks a crash and data findings, the lowest exit code wins within a verdict; diagnose on a healthy
record says so."""

from __future__ import annotations

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding
from ddpdoctor.analysis.registry import diagnose, verdict_of
from ddpdoctor.record.reader import RankRecord, RunRecord


def _f(fid: str, severity: str = "error") -> Finding:
    return Finding(fid, severity, "m")  # type: ignore[arg-type]


def test_no_errors_is_ok_unless_fail_on_asks() -> None:
    assert verdict_of([]) == ("ok", 0)
    assert verdict_of([_f("perf.grad-accum-no-sync", "warning")]) == ("ok", 0)
    assert verdict_of([_f("perf.grad-accum-no-sync", "warning")], fail_on="warning") == ("ok", 1)
    assert verdict_of([_f("seed.identical-streams", "note")], fail_on="warning") == ("ok", 0)


def test_the_most_serious_verdict_wins() -> None:
    assert verdict_of([_f("data.shard-overlap")]) == ("findings", 1)
    assert verdict_of([_f("data.shard-overlap"), _f("crash.abnormal-exit")]) == ("crash", 1)
    assert verdict_of([_f("crash.abnormal-exit"), _f("hang.transport-stall")]) == ("hang", 3)
    assert verdict_of([_f("run.not-started"), _f("run.no-distributed")]) == ("error", 2)


def test_a_healthy_record_is_ok_with_each_rank_finished() -> None:
    ranks = {
        r: RankRecord(r, events=[{"kind": "init", "world_size": 2}, {"kind": "finish", "code": 0, "t": 2.0}])
        for r in (0, 1)
    }
    report = diagnose(
        RunRecord("/run", {"command": "check"}, ranks, [{"kind": "exit", "t": 3.0, "returncode": 0}]), Config()
    )
    assert (report.verdict, report.exit_code, report.findings, report.summary) == ("ok", 0, (), "healthy: no findings")
    assert [r.state for r in report.ranks] == ["finished", "finished"]
    assert report.ranks[0].detail.startswith("finished (exit code 0)")
