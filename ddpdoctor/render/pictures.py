"""The pictures a run leaves in its run directory, keyed by name: which file, when a record has the data
for it, how to render it (pure: ``RunRecord -> str``, or ``(Report, RunRecord) -> str`` for a picture
that shows the diagnosis too, such as report.html) and the report's note about it. The command specs
name the pictures they want; the launcher writes the files."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ddpdoctor.analysis.findings import Report
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord


@dataclass(frozen=True)
class Picture:
    filename: str
    applies: Callable[[RunRecord], bool]
    render: Callable[[RunRecord], str]
    note: str
    remark: Callable[[RunRecord], str | None] = lambda _rec: None  # a second note, when it has something to say
    with_report: Callable[[Report, RunRecord], str] | None = None  # renders from the report too (html)

    def make(self, record: RunRecord, report: Report) -> str:
        return self.with_report(report, record) if self.with_report else self.render(record)


def _no_cuda(record: RunRecord) -> str | None:
    """The note on what the GPU path could not see: no GPU at all, or --snapshot asked where no rank used one."""
    none = sorted(
        r
        for r, rec in record.ranks.items()
        for e in rec.memory
        if e.get("kind") == schema.K_CUDA_SNAPSHOT and not e.get("path")
    )
    snap = (
        f"; --snapshot took nothing on rank(s) {none}: it records the CUDA allocator, which they never used"
        if none
        else ""
    )
    if any("cuda_allocated" in e for r in record.ranks.values() for e in r.memory):
        return snap[2:] or None
    return "no CUDA figures: no rank used a GPU (CPU RSS, live tensors and autograd graphs only)" + snap


def _memory_svg(record: RunRecord) -> str:
    from ddpdoctor.render.svg import memory_svg

    return memory_svg(record)


def _trace(record: RunRecord) -> str:
    from ddpdoctor.render.perfetto import render

    return render(record)


def _html(report: Report, record: RunRecord) -> str:
    from ddpdoctor.render.html.page import render

    return render(report, record)


PICTURES: dict[str, Picture] = {
    "memory": Picture(
        schema.MEMORY_SVG,
        lambda rec: any(r.memory for r in rec.ranks.values()),
        _memory_svg,
        "memory per rank per step",
        _no_cuda,
    ),
    "trace": Picture(
        schema.TRACE_JSON,
        lambda rec: any(r.timeline for r in rec.ranks.values()),
        _trace,
        "timeline (open in https://ui.perfetto.dev)",
    ),
    # last in every spec's list: it links the files the pictures before it wrote
    "html": Picture(
        schema.REPORT_HTML, lambda _rec: True, lambda _rec: "", "report to open in a browser", with_report=_html
    ),
}
