"""The pictures a run leaves in its run directory, keyed by name: which file, when a record has the data
for it, how to render it (pure: ``RunRecord -> str``) and the report's note about it. The command specs
name the pictures they want; the launcher writes the files."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ddpdoctor.record.reader import RunRecord


@dataclass(frozen=True)
class Picture:
    filename: str
    applies: Callable[[RunRecord], bool]
    render: Callable[[RunRecord], str]
    note: str
    remark: Callable[[RunRecord], str | None] = lambda _rec: None   # a second note, when it has something to say


def _no_cuda(record: RunRecord) -> str | None:
    if any("cuda_allocated" in e for r in record.ranks.values() for e in r.memory):
        return None
    return "no CUDA figures: no rank used a GPU (CPU RSS, live tensors and autograd graphs only)"


def _memory_svg(record: RunRecord) -> str:
    from ddpdoctor.render.svg import memory_svg

    return memory_svg(record)


def _trace(record: RunRecord) -> str:
    from ddpdoctor.render.perfetto import render

    return render(record)


PICTURES: dict[str, Picture] = {
    "memory": Picture("memory.svg", lambda rec: any(r.memory for r in rec.ranks.values()), _memory_svg,
                      "memory per rank per step", _no_cuda),
    "trace": Picture("trace.json", lambda rec: any(r.timeline for r in rec.ranks.values()), _trace,
                     "timeline (open in https://ui.perfetto.dev)"),
}
