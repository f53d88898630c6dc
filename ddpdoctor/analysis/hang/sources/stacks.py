"""The stacks ``ddpdoctor attach`` took (py-spy) as the judge's facts: a rank whose main thread sat in a
collective, DDP's all-reduce or a c10d wait in both dumps waits there (its op and line; a stack holds no
position), one that moved or sits outside any collective runs, one whose process is gone ended, one the world
names that left no stacks is missing. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ddpdoctor.analysis.hang.facts import ENDED, MISSING, RUNNING, WAITING, Call, RankFacts

if TYPE_CHECKING:
    from ddpdoctor.analysis.hang.attach import View


def call(v: View) -> Call:
    """Where a rank's stacks say it waits: its op (or DDP / a c10d wait) at its innermost user line."""
    site = (v.site.file, v.site.line) if v.site else None
    return Call(v.op if v.kind == "collective" and v.op else v.kind, sites=(site,) if site else ())


def facts(vs: Mapping[int, View], gone: Iterable[int] = (), unseen: Iterable[int] = ()) -> dict[int, RankFacts]:
    """One fact per rank: waiting where its stacks did not move and sit in a call, running otherwise."""
    out = {r: RankFacts(r, MISSING) for r in unseen}
    out.update({r: RankFacts(r, ENDED) for r in gone})
    for r, v in vs.items():
        waits = not v.moved and v.kind != "elsewhere"
        out[r] = RankFacts(r, WAITING, call(v)) if waits else RankFacts(r, RUNNING)
    return out
