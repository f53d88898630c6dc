"""`ddpdoctor attach`: a hang diagnosed from the ranks' stacks alone (py-spy, read from outside). Pure.

The record holds, per rank, the main thread's stack at two dumps ``interval`` apart (``moved``: it changed)
and the native frames of the ranks that did not move. Each rank is inside a torch.distributed collective
(a ``distributed_c10d.py`` frame: the function is the op, the innermost user frame the line), inside
autograd backward (DDP's gradient all-reduce), in a native c10d wait (``Work.wait()``), or elsewhere. The
findings are ``hang``'s, with the same helpers for the user's stack, early exits and rank tests
(:mod:`ddpdoctor.analysis.hang.paths`). Stacks show where each rank is now, not the collectives it made before:
every finding says it rests on stacks only.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence
from typing import Any

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, Location, Severity, group_values, ranks_phrase, unseen_phrase
from ddpdoctor.analysis.hang import judge, paths, policy
from ddpdoctor.analysis.hang.deadlock import BLOCKED_HINT, HINTS, hint_for
from ddpdoctor.analysis.hang.exits import ways_out
from ddpdoctor.analysis.hang.facts import WAITING, Call, RankTest, Slot
from ddpdoctor.analysis.hang.paths import (
    _loops,
    _tree,
    departed,
    loop_exits,
    rank_guard,
    user_stack,
)
from ddpdoctor.analysis.hang.sources.stacks import View
from ddpdoctor.analysis.hang.sources.stacks import facts as stacks_facts
from ddpdoctor.analysis.ids import (
    ATTACH_RUNNING,
    HANG_DIVERGENT_COLLECTIVE,
    HANG_EARLY_EXIT,
    HANG_RANK_CONDITIONAL_COLLECTIVE,
    HANG_TIMEOUT,
    HANG_TRANSPORT_STALL,
)
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

C10D = "torch/distributed/distributed_c10d.py"
COLLECTIVES = {
    "all_reduce",
    "barrier",
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "gather",
    "scatter",
    "all_to_all",
    "all_to_all_single",
    "all_gather_object",
    "broadcast_object_list",
    "gather_object",
    "scatter_object_list",
    "send",
    "recv",
    "isend",
    "irecv",
    "monitored_barrier",
    "batch_isend_irecv",
}
STACKS_ONLY = (
    "Proven from stacks only (where each rank is now, not the collectives it made before); "
    "`ddpdoctor hang` on a rerun proves it with the collective ledger."
)
_IDLE = 0.05  # CPU seconds per wall second under which a rank that did not move is blocked


def collective_of(stack: list[list[Any]]) -> tuple[str | None, bool]:
    """(the public torch.distributed call the stack is inside, whether it is inside autograd backward or
    DDP's forward). ``stack`` is outermost first, frames ``[file, line, func]``."""
    op = None
    for f in stack:
        if str(f[0]).replace("\\", "/").endswith(C10D) and not str(f[2]).startswith("_"):
            op = str(f[2])
            break
    files = [str(f[0]).replace("\\", "/") for f in stack]
    ddp = any(
        p.endswith(("torch/autograd/__init__.py", "torch/autograd/graph.py", "torch/nn/parallel/distributed.py"))
        for p in files
    )
    return op, ddp


def views(record: RunRecord) -> dict[int, View]:
    """Each rank's View, from its latest stack dump (ranks without one are left out)."""
    out = {}
    for r, rec in record.ranks.items():
        st = rec.stacks
        if not st:
            continue
        main = next((t for t in st.get("threads") or [] if t.get("main")), None) or {}
        op, ddp = collective_of(main.get("stack") or [])
        native = " ".join(main.get("native") or [])
        user = user_stack(record, r)
        site = Location(r, user[-1][0], user[-1][1], user[-1][2]) if user else None
        kind = (
            "collective"
            if op
            else "ddp"
            if ddp
            else "wait"
            if ("c10d" in native or "ProcessGroup" in native or "nccl" in native.lower())
            else "elsewhere"
        )
        cpu = st.get("cpu")
        out[r] = View(r, kind, op, site, bool(st.get("moved")), cpu is not None and float(cpu) < _IDLE)
    return out


def _loc(v: View, role: str) -> Location | None:
    return Location(v.rank, v.site.file, v.site.line, v.site.func, role) if v.site else None


def _guarded_calls(path: str, first: int, last: int, world: int) -> list[tuple[int, RankTest]]:
    """(call line, the rank test on its way) of the torch.distributed collectives between ``first`` and ``last``
    that are reached under a rank test inside that span (``paths.rank_test``: the one reading of a rank test,
    an ``else`` branch's ranks included)."""
    tree = _tree(path)
    out = []
    for n in ast.walk(tree) if tree else ():
        if isinstance(n, ast.Call) and first <= n.lineno <= last:
            name = (
                n.func.attr if isinstance(n.func, ast.Attribute) else n.func.id if isinstance(n.func, ast.Name) else ""
            )
            t = paths.rank_test([(path, n.lineno)], world) if name in COLLECTIVES else None
            if t is not None and first <= t.test:
                out.append((n.lineno, t))
    return sorted(out, key=lambda c: c[0])


def _finding(
    fid: str,
    severity: Severity,
    msg: str,
    hint: str,
    vs: dict[int, View],
    locs: Sequence[Location | None],
    culprits: list[int],
    ev: dict,
) -> Finding:
    return Finding(
        fid,
        severity,
        f"{msg} [stacks only]",
        f"{hint} {STACKS_ONLY}",
        tuple(sorted(vs)),
        tuple(x for x in locs if x is not None),
        dict(ev, source="stacks (py-spy)"),
        culprits=tuple(sorted(culprits)),
    )


def detect(record: RunRecord, cfg: Config) -> list[Finding]:
    """The hang of an attach run directory, from the ranks' stacks alone, by the one policy (policy.py)."""
    if record.manifest.get("command") != schema.CMD_ATTACH:
        return []
    vs = views(record)
    if not vs:
        return []
    return policy.judge(StackCase(record, vs))


class StackCase(policy.Case):
    """The stacks ``ddpdoctor attach`` took as the policy's case: where each rank's main thread is in two
    looks some time apart (``View``), which ranks had exited before it attached, and which the world names
    that left no stacks. Stacks hold lines and moves, never positions: the questions of positions and
    histories are left to the ledger and the dumps."""

    source = "stacks"
    can = frozenset({policy.LINES, policy.ENDINGS, policy.MOVES})

    def __init__(self, record: RunRecord, vs: dict[int, View]) -> None:
        self.record, self.vs = record, vs
        gone = sorted(r for r, rec in record.ranks.items() if rec.event(schema.K_GONE))
        world = max(
            [record.world_size or 0]
            + [int(e.get("world_size") or 0) for r in gone if (e := record.ranks[r].event(schema.K_GONE))]
        )
        self.gone, self.world = gone, world
        self.unseen = [r for r in range(world) if r not in vs and r not in gone]
        self.ev: dict[str, Any] = {
            "interval": (record.manifest.get("attach") or {}).get("interval"),
            "moved": sorted(r for r, v in vs.items() if v.moved),
            "gone": gone,
            "unseen": self.unseen,
        }
        self.facts = stacks_facts(vs, gone, self.unseen)
        self.stuck = {r: v for r, v in vs.items() if not v.moved}
        self.waiting = {r: v for r, v in vs.items() if self.facts[r].state == WAITING}
        self.desc = {r: v.text() for r, v in vs.items()}

    def lend(self, f: Finding) -> Finding:
        # the dumps' finding (a JSON dump holds no lines): each rank it names, at the line its stacks show
        have = {loc.rank for loc in f.locations}
        add = [
            loc
            for r in sorted(set(f.ranks) | set(f.culprits))
            if r not in have and r in self.vs
            for loc in [_loc(self.vs[r], "diverged" if r in f.culprits else "waiting")]
            if loc is not None
        ]
        return dataclasses.replace(
            f,
            message=f"{f.message} (from the flight recorder; the stacks give each rank's line)",
            locations=f.locations + tuple(add),
        )

    def rank_test(self) -> Finding | None:
        # a wait reached under `if rank == ...:` that the other ranks are not in: the waiting ranks diverged
        got = judge.rank_test(self.facts, self._test_of)
        if got is None:
            return None
        div, g = list(got[0]), got[1]
        vs, gone = self.vs, self.gone
        v = vs[div[0]]
        locs = [_loc(vs[q], "diverged") for q in div] + [
            _loc(w, "waiting" if w.kind != "elsewhere" else "elsewhere") for q, w in vs.items() if q not in div
        ]
        gbase = g.file.rsplit("/", 1)[-1]
        verb = "waits" if len(div) == 1 else "wait"
        rest = group_values({q: self.desc[q] for q in vs if q not in div}) or "no other rank"
        msg = (
            f"a collective is called on some ranks only: {ranks_phrase(div)} {verb} in {v.text()} under the "
            f"rank test at {gbase}:{g.test}; {rest}" + (f"; {ranks_phrase(gone)} exited" if gone else "")
        )
        return _finding(
            HANG_RANK_CONDITIONAL_COLLECTIVE,
            "error",
            msg,
            hint_for(self.record, HANG_RANK_CONDITIONAL_COLLECTIVE),
            vs,
            locs,
            div,
            dict(self.ev, guard=[g.file, g.test]),
        )

    def _test_of(self, r: int, _c: Call) -> RankTest | None:
        """The rank test on the way to the collective rank ``r``'s stacks sit in: around its line or a caller's
        on its stack (DDP's all-reduce and a c10d wait name no collective of the user's)."""
        v = self.vs.get(r)
        if v is None or v.kind != "collective" or v.site is None:
            return None
        return paths.rank_test_of(self.record, r, [v.site.file, v.site.line], self.world)

    def _groups(self) -> dict[tuple, list[int]]:
        groups: dict[tuple, list[int]] = {}
        for r, v in sorted(self.waiting.items()):
            groups.setdefault(v.key(), []).append(r)
        return groups

    def _apart(self) -> bool:
        """Every rank is stuck inside a call (none moved, none elsewhere), and not all in one place."""
        w = self.waiting
        return bool(self.stuck and w) and all(r in w for r in self.vs) and not judge.one_place(self.facts[r] for r in w)

    def left_early(self) -> Finding | None:
        if not self.gone and self._apart():
            # ranks stuck in different calls: a group of them left the loop the others are still in
            return _departed(self.record, self.vs, self._groups(), self.desc, self.ev)
        return None

    def exited(self) -> Finding | None:
        """Ranks whose processes were gone before ``attach`` looked, while the others wait: the ledger's
        ``exited`` question, over the processes instead of the finish events."""
        gone, waiting = self.gone, self.waiting
        if not gone or not waiting:
            return None
        w = next(iter(waiting.values()))
        exits = loop_exits(w.site.file, w.site.line, every_loop=True) if w.site else ()
        locs: list[Location | None] = []
        if w.site:
            # the ways out each rank that left may have taken (a rank-tested break is only some ranks' way out)
            ways, exits = ways_out(w.site.file, exits, gone, self.world)
            locs += ways
        locs += [_loc(v, "waiting") for v in waiting.values()]
        base = w.site.file.rsplit("/", 1)[-1] if w.site else "?"
        left = ", ".join(f"{base}:{x}" for x in exits[:3])
        msg = (
            f"{ranks_phrase(gone)} exited while the others still wait: "
            f"{group_values({r: self.desc[r] for r in waiting})}" + (f" (the loop is left at {left})" if exits else "")
        )
        return _finding(
            HANG_EARLY_EXIT, "error", msg, hint_for(self.record, HANG_EARLY_EXIT), self.vs, locs, gone, self.ev
        )

    def all_moved(self) -> Finding | None:
        if self.stuck:
            return None
        vs = self.vs
        return Finding(
            ATTACH_RUNNING,
            "note",
            f"every rank moved between the two stack dumps {self.ev['interval']} s apart: no hang seen "
            f"({group_values(self.desc)})",
            "If the job still looks stuck, attach again later, or run it under `ddpdoctor hang`.",
            tuple(sorted(vs)),
            tuple(x for x in (_loc(v, "running") for v in vs.values()) if x),
            self.ev,
        )

    def elsewhere(self) -> Finding | None:
        waiting, desc = self.waiting, self.desc
        elsewhere = {r: v for r, v in self.vs.items() if r not in waiting}
        if not waiting or not elsewhere:
            return None
        sev: Severity = "error" if not any(v.moved for v in elsewhere.values()) else "warning"
        msg = (
            f"{group_values({r: desc[r] for r in elsewhere})}; while "
            f"{group_values({r: desc[r] for r in waiting})}"
            + ("" if sev == "error" else " (a running rank may yet arrive)")
        )
        locs = [_loc(v, "elsewhere") for v in elsewhere.values()] + [_loc(v, "waiting") for v in waiting.values()]
        return _finding(HANG_TIMEOUT, sev, msg, HINTS[HANG_TIMEOUT], self.vs, locs, list(elsewhere), self.ev)

    def none_waiting(self) -> Finding | None:
        if self.waiting:
            return None
        vs = self.vs
        idle = all(v.idle for v in vs.values())
        msg = f"no rank is inside a collective and none moved: {group_values(self.desc)}"
        locs = [_loc(v, "blocked") for v in vs.values()]
        return _finding(HANG_TIMEOUT, "error" if idle else "warning", msg, BLOCKED_HINT, vs, locs, list(vs), self.ev)

    def one_place(self) -> Finding | None:
        waiting, vs, ev = self.waiting, self.vs, self.ev
        if not judge.one_place(self.facts[r] for r in waiting):
            return None
        v = next(iter(waiting.values()))
        if self.unseen:
            msg = f"every rank here waits in {v.text()}; {unseen_phrase(self.unseen)}"
            hint = (
                "A rank on another node is probably elsewhere: run `ddpdoctor attach` on every node and "
                "merge the run directories with `ddpdoctor analyze DIR1 DIR2 ...`."
            )
            return _finding(
                HANG_TIMEOUT, "warning", msg, hint, vs, [_loc(w, "waiting") for w in waiting.values()], [], ev
            )
        idle = all(w.idle for w in waiting.values())
        # the stacks hold no positions: a rank one call ahead at the same line (its extra call finished against
        # the others' call, as gloo lets a call of fewer bytes do: tests/frjobs/pipejob.py extra) looks the same
        msg = (
            f"all ranks inside the same {v.text()}: no rank is seen on another path (a slow peer, the network or "
            "the backend); the stacks hold no positions, so a rank one call ahead at the same line looks the "
            "same: the flight recorder or `ddpdoctor hang` tells them apart"
            + ("" if idle else "; the ranks use CPU, it may still be moving")
        )
        return _finding(
            HANG_TRANSPORT_STALL,
            "error" if idle else "warning",
            msg,
            HINTS[HANG_TRANSPORT_STALL],
            vs,
            [_loc(w, "waiting") for w in waiting.values()],
            [],
            ev,
        )

    def different_calls(self) -> Finding | None:
        return _parting(self.vs, self.desc, self.ev) if self._apart() else None


def _departed(
    record: RunRecord, vs: dict[int, View], groups: dict[tuple, list[int]], desc: dict[int, str], ev: dict
) -> Finding | None:
    """Ranks wait in different collectives or lines: an extra call under a rank test inside the loop the
    others left, or an early exit (a group that left the loop the others are still in); None where no group
    of ranks left a loop (or returned from a call) the others are in (``paths.departed``, as the ledger asks)."""
    world = max(record.world_size or 0, max(vs) + 1)
    got = departed(
        record,
        groups.values(),
        sorted(vs),
        # a leaver's call a rank test led it to is a rank-conditional call (paths.rank_guard, as the ledger asks)
        lambda r: (v := vs[r]).site is not None and rank_guard(record, r, [v.site.file, v.site.line]) is not None,
    )
    if got is None:
        return None
    leavers, dep = list(got[0]), got[1]
    stay = [r for r in sorted(vs) if r not in leavers]
    loop = next((lp for lp in _loops(dep.file) if lp[0] == dep.line), None) if dep.how == "left the loop" else None
    for line, test in _guarded_calls(dep.file, loop[0], loop[1], world) if loop else []:
        g, who = test.test, test.ranks
        if who is not None and not who & set(stay):
            continue
        extra = sorted(set(stay) & who) if who else sorted(stay)
        base = dep.file.rsplit("/", 1)[-1]
        locs: list[Location | None] = [Location(r, dep.file, line, dep.func, "diverged") for r in extra]
        locs += [_loc(vs[r], "waiting") for r in sorted(vs)]
        msg = (
            f"a collective is called on some ranks only: {ranks_phrase(extra)} made the extra call at "
            f"{base}:{line} (under the rank test at {base}:{g}) and fell one collective behind; now "
            f"{group_values(desc, first=extra)}"
        )
        return _finding(
            HANG_RANK_CONDITIONAL_COLLECTIVE,
            "error",
            msg,
            hint_for(record, HANG_RANK_CONDITIONAL_COLLECTIVE),
            vs,
            locs,
            extra,
            dict(ev, guard=[dep.file, g], extra_call=line),
        )
    locs = list(ways_out(dep.exit_file, dep.exits, leavers, world)[0])
    locs += [_loc(vs[r], "left early, waits here") for r in leavers] + [_loc(vs[r], "waiting") for r in stay]
    msg = f"{ranks_phrase(leavers)} {dep.words()} and wait in {vs[leavers[0]].text()}; " + group_values(
        {r: desc[r] for r in stay}
    )
    return _finding(
        HANG_EARLY_EXIT,
        "error",
        msg,
        hint_for(record, HANG_EARLY_EXIT),
        vs,
        locs,
        leavers,
        dict(ev, departure={"file": dep.file, "line": dep.line}),
    )


def _parting(vs: dict[int, View], desc: dict[int, str], ev: dict) -> Finding:
    """Ranks wait in different collectives or lines, and no rank left a loop the others are in: the ranks
    whose call is the odd one where the walk to the first parting names them, else every rank."""
    # the stacks hold no positions: the walk to the first parting reads the one position they show, the call
    # each rank waits in now (what must agree there: where it waits)
    slots = {
        r: Slot(v.op or v.kind, (v.site.file, v.site.line) if v.site else None, agree=v.key()) for r, v in vs.items()
    }
    part = next(judge.partings(sorted(vs), ["now"], lambda r, _now: slots[r]), None)
    culprits = list(part.odd) if part is not None else sorted(vs)
    locs = [_loc(vs[r], "diverged" if r in culprits and len(culprits) < len(vs) else "waiting") for r in sorted(vs)]
    msg = f"ranks wait in different collectives: {group_values(desc, first=culprits)}"
    return _finding(HANG_DIVERGENT_COLLECTIVE, "error", msg, HINTS[HANG_DIVERGENT_COLLECTIVE], vs, locs, culprits, ev)
