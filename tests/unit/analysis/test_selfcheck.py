"""probe.internal-error: each failing probe place becomes one note naming the ranks and what is missing;
a run without probe errors has none."""

from __future__ import annotations

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.selfcheck import detect
from ddpdoctor.record.reader import RankRecord, RunRecord


def _record(events: dict[int, list[dict]]) -> RunRecord:
    return RunRecord("/run", {"command": "hang"}, {r: RankRecord(r, events=e) for r, e in events.items()}, [])


def _err(where: str = "all_reduce wrapper", error: str = "KeyError: 'x'", **kw) -> dict:
    return {"kind": "probe_error", "where": where, "error": error, **kw}


def test_a_run_without_probe_errors_has_no_finding() -> None:
    assert detect(_record({0: [{"kind": "start"}], 1: [{"kind": "finish", "code": 0}]}), Config()) == []


def test_the_same_failure_on_two_ranks_is_one_note_naming_both() -> None:
    (f,) = detect(_record({0: [_err()], 1: [], 2: [_err()]}), Config())
    assert f.id == "probe.internal-error" and f.severity == "note"
    assert f.ranks == (0, 2) and f.culprits == ()
    assert f.message.startswith("ddpdoctor's all_reduce wrapper failed on 2 ranks [0,2] (KeyError: 'x'): ")
    assert "not in the ledger" in f.message  # older records: the default gap


def test_different_places_are_different_notes_with_their_own_missing_data() -> None:
    found = detect(
        _record({0: [_err(), _err("memory sampler", "OSError", missing="memory lines after step 4 are missing")]}),
        Config(),
    )
    assert [f.evidence["where"] for f in found] == ["all_reduce wrapper", "memory sampler"]
    assert found[1].message == (
        "ddpdoctor's memory sampler failed on rank 0 (OSError): memory lines after step 4 are missing"
    )
