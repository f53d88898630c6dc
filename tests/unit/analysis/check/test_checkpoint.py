"""checkpoint.multiple-writers: several ranks saving to one path is an error naming those ranks; one
writer, or one path per rank, is fine."""

from __future__ import annotations

from ddpdoctor.analysis.check.checkpoint import detect
from ddpdoctor.analysis.config import Config
from ddpdoctor.record.reader import RankRecord, RunRecord


def _save(path: str, line: int = 40) -> dict:
    return {"kind": "save", "path": path, "step": 10, "site": ["/work/train.py", line, "main"]}


def _record(checks: dict[int, list[dict]]) -> RunRecord:
    return RunRecord("/run", {"command": "check"}, {r: RankRecord(r, checks=c) for r, c in checks.items()}, [])


def test_one_writer_or_one_path_per_rank_is_fine() -> None:
    assert detect(_record({0: [_save("/ck/model.pt")], 1: []}), Config()) == []
    assert detect(_record({0: [_save("/ck/model-0.pt")], 1: [_save("/ck/model-1.pt")]}), Config()) == []


def test_two_ranks_writing_the_same_file_are_both_culprits() -> None:
    rec = _record({0: [_save("/ck/model.pt")], 1: [], 2: [_save("/ck/model.pt", 41)]})
    (f,) = detect(rec, Config())
    assert f.id == "checkpoint.multiple-writers" and f.severity == "error"
    assert f.culprits == (0, 2) and f.ranks == (0, 2)
    assert f.message.startswith("2 ranks [0,2] all write /ck/model.pt")
    assert [(l.rank, l.line, l.role) for l in f.locations] == [(0, 40, "stores"), (2, 41, "stores")]
    assert f.evidence == {"path": "/ck/model.pt"}


def test_each_shared_path_is_its_own_finding_and_repeated_saves_count_once() -> None:
    rec = _record(
        {
            0: [_save("/a.pt"), _save("/a.pt"), _save("/b.pt")],
            1: [_save("/a.pt"), _save("/b.pt")],
        }
    )
    found = detect(rec, Config())
    assert [f.evidence["path"] for f in found] == ["/a.pt", "/b.pt"]
    assert all(len(f.locations) == 2 for f in found)


def test_a_save_without_a_path_is_ignored() -> None:
    rec = _record({0: [{"kind": "save", "path": None}], 1: [{"kind": "save", "path": None}]})
    assert detect(rec, Config()) == []
