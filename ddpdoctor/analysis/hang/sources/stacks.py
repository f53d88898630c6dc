"""The stacks ``ddpdoctor attach`` took (py-spy) as the judge's facts: a rank whose main thread sat in a
collective, DDP's all-reduce or a c10d wait in both dumps waits there (its op and line; a stack holds no
position), one that moved or sits outside any collective runs, one whose process is gone ended, one the world
names that left no stacks is missing. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ddpdoctor.analysis.findings import Location
from ddpdoctor.analysis.hang.facts import ENDED, MISSING, RUNNING, WAITING, Call, RankFacts


@dataclass(frozen=True)
class View:
    """Where one rank's main thread is, read from its stacks: in a collective, DDP, a wait, elsewhere."""

    rank: int
    kind: str  # collective | ddp | wait | elsewhere
    op: str | None
    site: Location | None
    moved: bool
    idle: bool

    def text(self) -> str:
        """Where the rank is, in words."""
        at = f" at {self.site.file.rsplit('/', 1)[-1]}:{self.site.line}" if self.site else ""
        if self.kind == "collective":
            return f"{self.op}{at}"
        if self.kind == "ddp":
            return f"DDP's gradient all-reduce (backward){at}"
        if self.kind == "wait":
            return f"a c10d wait (Work.wait / sync){at}"
        return f"{'running' if self.moved else 'blocked'} outside any collective{at}{_code(self.site)}"

    def key(self) -> tuple:
        """Ranks with the same key are at the same place."""
        return (self.kind, self.op, self.site.file if self.site else None, self.site.line if self.site else None)


def _code(where: Location | None) -> str:
    import linecache

    text = linecache.getline(where.file, where.line).strip() if where else ""
    if " #" in text:
        text = text[: text.index(" #")].rstrip()
    return f" (`{text[:60]}`)" if text else ""


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
