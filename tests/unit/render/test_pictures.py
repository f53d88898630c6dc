"""The pictures a run leaves (render/pictures.py): which apply to a record, what each renders, and the
note about CUDA that the memory picture adds."""

from __future__ import annotations

import json

import timelines

from ddpdoctor.analysis.findings import Report
from ddpdoctor.record.reader import RankRecord, RunRecord
from ddpdoctor.render.pictures import PICTURES


def _record(memory: list | None = None, timeline: list | None = None) -> RunRecord:
    return RunRecord(
        "/run", {"command": "memleak"}, {0: RankRecord(0, memory=memory or [], timeline=timeline or [])}, []
    )


def test_each_picture_applies_only_when_the_record_has_its_data() -> None:
    bare = _record()
    assert (
        not PICTURES["memory"].applies(bare) and not PICTURES["trace"].applies(bare) and PICTURES["html"].applies(bare)
    )
    assert PICTURES["memory"].applies(_record(memory=[{"kind": "mem", "step": 1, "rss": 1}]))
    assert PICTURES["trace"].applies(_record(timeline=timelines.steps(1)))
    assert [p.filename for p in PICTURES.values()] == ["memory.svg", "trace.json", "report.html"]


def test_make_renders_the_files_content() -> None:
    rec = _record(memory=[{"kind": "mem", "step": s, "rss": s} for s in range(3)], timeline=timelines.steps(2))
    report = Report("profile", "ok", 0, "/run")
    assert PICTURES["memory"].make(rec, report).startswith("<svg")
    assert json.loads(PICTURES["trace"].make(rec, report))["otherData"] == {"tool": "ddpdoctor"}
    assert "<html" in PICTURES["html"].make(rec, report).lower()


def test_the_memory_note_says_when_no_rank_used_a_gpu() -> None:
    remark = PICTURES["memory"].remark
    cpu = _record(memory=[{"kind": "mem", "step": 1, "rss": 1}, {"kind": "cuda_snapshot", "which": "last"}])
    assert remark(cpu) == (
        "no CUDA figures: no rank used a GPU (CPU RSS, live tensors and autograd graphs only); --snapshot took "
        "nothing on rank(s) [0]: it records the CUDA allocator, which they never used"
    )
    gpu = _record(memory=[{"kind": "mem", "step": 1, "rss": 1, "cuda_allocated": 5}])
    assert remark(gpu) is None
