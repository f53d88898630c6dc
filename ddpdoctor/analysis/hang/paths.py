"""Where each rank's code path went: its main-thread stack (user frames) from whatever the record holds,
and whether a rank that diverged had *left* the loop (or returned from the call) the other ranks are still
in: an early exit, not an extra collective inside the loop. Pure: reads the user's source with ``ast``.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ddpdoctor.analysis.hang.facts import RankTest
from ddpdoctor.analysis.state import is_user_path
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

_FH_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')


def user_stack(record: RunRecord, rank: int) -> list[tuple[str, int, str]] | None:
    """The rank's main-thread user frames, outermost first: from the stack dump taken at the verdict, else
    faulthandler's dump of a fatal signal, else the traceback of its exception, else faulthandler's dump
    when it was ended (SIGTERM); the first source that holds a user frame wins."""
    rec = record.ranks[rank]
    sources: list[list | None] = []
    if rec.stacks:
        main = next((t for t in rec.stacks.get("threads", []) if t.get("main")), None)
        sources.append(main.get("stack") if main else None)
    sources.append(_faulthandler_main(rec.fatal, record))
    sources.append((rec.error or {}).get("frames"))
    sources.append(_faulthandler_main(rec.terminated, record))
    for frames in sources:
        user = [
            (str(f[0]), int(f[1]), str(f[2])) for f in frames or () if len(f) >= 3 and is_user_path(str(f[0]), record)
        ]
        if user:
            return user
    return None


def _faulthandler_main(text: str, record: RunRecord) -> list | None:
    """The thread of a faulthandler dump that was running the script: the one with user frames."""
    for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", text or ""):
        frames = [(f, int(n), fn) for f, n, fn in _FH_FRAME.findall(block)]
        if any(is_user_path(f[0], record) for f in frames):
            return list(reversed(frames))  # faulthandler lists the innermost first
    return None


@dataclass(frozen=True)
class Departure:
    """The diverged rank had left the place the others are still in."""

    how: str  # "left the loop" | "returned from"
    file: str
    line: int  # the loop's first line, or the call the others are still inside
    func: str
    exits: tuple[int, ...] = ()  # the break/return lines that leave that loop (where the culprit left)
    exit_file: str = ""

    def words(self) -> str:
        """What the leavers did, for a finding's message: "left the loop at train.py:40 early", "returned early
        from the call at train.py:12 (main)"."""
        short = f"{self.file.rsplit('/', 1)[-1]}:{self.line}"
        if self.how == "left the loop":
            return f"left the loop at {short} early"
        return f"returned early from the call at {short} ({self.func})"


_LOOP = (ast.For, ast.While, ast.AsyncFor)


@functools.lru_cache(maxsize=64)
def _tree(path: str) -> ast.AST | None:
    try:
        with open(path, encoding="utf-8") as f:
            return ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None


def _loops(path: str) -> tuple[tuple[int, int], ...]:
    tree = _tree(path)
    return (
        ()
        if tree is None
        else tuple((n.lineno, n.end_lineno or n.lineno) for n in ast.walk(tree) if isinstance(n, _LOOP))
    )


def loop_exits(path: str, line: int, every_loop: bool = False) -> tuple[int, ...]:
    """Lines of the ``break``/``return``/``sys.exit`` statements that leave the outermost loop holding
    ``line`` (a break of a nested loop only leaves that one); ``every_loop``: of every loop holding it."""
    tree = _tree(path)
    if tree is None:
        return ()
    loops = [n for n in ast.walk(tree) if isinstance(n, _LOOP) and n.lineno <= line <= (n.end_lineno or 0)]
    if not loops:
        return ()
    if every_loop:
        return tuple(sorted({x for lp in loops for x in _exits_of(lp)}))
    return _exits_of(min(loops, key=lambda n: n.lineno))


def _exits_of(outer: ast.AST) -> tuple[int, ...]:
    out: list[int] = []

    def visit(node: ast.AST, depth: int) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(child, ast.Break) and depth == 0 or isinstance(child, ast.Return):
                out.append(child.lineno)
            elif (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Attribute)
                and child.func.attr == "exit"
                and isinstance(child.func.value, ast.Name)
                and child.func.value.id == "sys"
            ):
                out.append(child.lineno)
            visit(child, depth + 1 if isinstance(child, _LOOP) else depth)

    for stmt in outer.body:  # type: ignore[attr-defined]  # not orelse: runs when no break left the loop
        visit(ast.Module(body=[stmt], type_ignores=[]), 0)
    return tuple(sorted(set(out)))


def departure(record: RunRecord, diverged: int, other: int) -> Departure | None:
    """Did ``diverged`` leave a loop (or return from a call) that ``other`` is still inside?

    The two stacks are walked from the outermost frame while they are in the same function; where their
    lines part, ``diverged`` left when its line lies after every loop there that holds ``other``'s line
    (no enclosing loop could bring ``other`` back past it), or, with no loop there, after the call that
    ``other`` is still inside. Inside a loop that holds both lines the answer is unknown (None), unless
    ``other`` has started more DataLoader passes (it went round the outer loop: not a departure)."""
    sd, so = user_stack(record, diverged), user_stack(record, other)
    if not sd or not so:
        return None
    for fd, fo in zip(sd, so):
        if (fd[0], fd[2]) != (fo[0], fo[2]):
            return None
        if fd[1] == fo[1]:
            continue
        path, ld, lo = fd[0], fd[1], fo[1]
        holding = [lp for lp in _loops(path) if lp[0] <= lo <= lp[1]]
        if not holding:
            i = sd.index(fd)
            if not (ld > lo and len(so) > i + 1):
                return None
            # the others are still inside the call at ``lo``: find the loop they are in, deeper down
            exits: tuple[int, ...] = ()
            for f in so[i + 1 :]:
                exits = loop_exits(f[0], f[1])
                if exits:
                    return Departure("returned from", path, lo, fo[2], exits=exits, exit_file=f[0])
            return Departure("returned from", path, lo, fo[2])
        left = [lp for lp in holding if not lp[0] <= ld <= lp[1] and ld > lp[1]]
        if not left:
            return None
        outer = min(left)  # the outermost loop it left
        exits = loop_exits(path, outer[0])
        if len(left) == len(holding):
            return Departure("left the loop", path, outer[0], fo[2], exits=exits, exit_file=path)
        # a loop around both: ``other`` may have gone round it and past ``ld`` already; it has not
        # when both ranks are in the same DataLoader pass
        np_d, np_o = passes(record, diverged), passes(record, other)
        return (
            Departure("left the loop", path, outer[0], fo[2], exits=exits, exit_file=path)
            if np_d and np_d == np_o
            else None
        )
    return None


def departed(
    record: RunRecord, candidates: Iterable[Sequence[int]], ranks: Iterable[int], tested: Callable[[int], bool]
) -> tuple[tuple[int, ...], Departure] | None:
    """Which ranks left, and where: the one group of ``candidates`` whose every rank left the loop (or returned
    from the call) the first of the other ``ranks`` is still in (``departure``), and the first leaver's way.
    None where no group did, or more than one did (the stacks cannot tell which), or a leaver's own call is
    one a rank test led it to (``tested``: a rank-conditional call, not an early exit).

    The one body of the policy's left-early question over the ranks' stacks: the ledger (analysis/hang/
    deadlock.py, its divergence's groups of ranks) and the stacks ``attach`` took (attach.py, the ranks
    grouped by where they wait) ask it."""
    every = list(ranks)
    found = []
    for leavers in candidates:
        others = [r for r in every if r not in leavers]
        if not others or any(tested(d) for d in leavers):
            continue
        deps = [departure(record, d, others[0]) for d in leavers]
        if deps[0] is not None and all(x is not None for x in deps):
            found.append((tuple(leavers), deps[0]))
    return found[0] if len(found) == 1 else None


def passes(record: RunRecord, rank: int) -> int:
    """How many times the rank started iterating a DataLoader."""
    return sum(1 for e in record.ranks[rank].events if e.get("kind") == schema.K_DATALOADER)


_RANK_TEST = re.compile(r"rank|gpu_id|is_main|main_process|master|global_zero|process_zero|is_primary|device_id")


@functools.lru_cache(maxsize=1024)  # asked per rank: a thousand ranks waiting in one call ask the same line
def _guard_branch(path: str, line: int) -> tuple[int, bool, tuple[int, int]] | None:
    """(the line of the innermost ``if`` around ``line`` whose test looks at the rank (``if rank == 0:``,
    ``if self.gpu_id == 0 and ...``, ``if master_process:``, ``if trainer.is_global_zero:``), whether ``line`` is
    in its ``else``, the first and last line of the branch ``line`` is in)."""
    tree = _tree(path)
    if tree is None:
        return None
    best = None
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and n.lineno < line <= (n.end_lineno or 0):
            body = [b for b in n.body if b.lineno <= line <= (b.end_lineno or b.lineno)]
            other = [b for b in n.orelse if b.lineno <= line <= (b.end_lineno or b.lineno)]
            if (body or other) and _RANK_TEST.search(ast.unparse(n.test)):
                if best is None or n.lineno > best[0]:
                    branch = n.body if body else n.orelse
                    span = (branch[0].lineno, max(b.end_lineno or b.lineno for b in branch))
                    best = (n.lineno, bool(other) and not body, span)
    return best


def rank_test(frames: Iterable[Any], world: int) -> RankTest | None:
    """The rank test on the way to a call: the innermost of ``frames`` ((file, line[, function]), innermost
    first: the call and its callers, as ``Call.sites`` holds them) that sits under an ``if`` testing the rank,
    with the ranks that take that branch where the test says. Reads the source files (where they are readable);
    None when no frame is under one. The one reading every source gives the rank-test rule
    (``judge.rank_test``)."""
    for path, line in ((str(f[0]), int(f[1])) for f in frames):
        g = _guard_branch(path, line)
        if g is not None:
            who = guard_ranks(path, g[0], world)
            if who is not None and g[1]:
                who = set(range(world)) - who
            return RankTest(path, line, g[0], frozenset(who) if who is not None else None, g[2])
    return None


def frames_to(record: RunRecord, rank: int, site: Any) -> list[tuple[str, int]]:
    """The way to a rank's call, innermost first: the call's line (``site``), then the user frames of the
    rank's stack (``user_stack``) from the innermost out."""
    frames: list[tuple[str, int]] = []
    if site:
        frames.append((str(site[0]), int(site[1])))
    stack = user_stack(record, rank) or []
    frames += [(f[0], f[1]) for f in reversed(stack)]
    return frames


def rank_test_of(record: RunRecord, rank: int, site: Any, world: int) -> RankTest | None:
    """The rank test on rank ``rank``'s way to its call at ``site`` ((file, line[, function])), as its records
    show the way: around the call's line or a caller's on its stack (``frames_to``, ``rank_test``); where the
    stack does not pass through the call's function (an asynchronous call waited on elsewhere, a rank with no
    stack), around a call of that function elsewhere in its file that the test lets the rank take
    (``if rank == 0: log(x)``, the collective inside ``log``). The one reading the ledger (its rank-test and
    extra-call rules) and the stacks give the rank-test rule (``judge.rank_test``)."""
    if not site:
        return None
    got = rank_test(frames_to(record, rank, site), world)
    if got is not None:
        return got
    path, line = str(site[0]), int(site[1])
    span = _function_at(path, line)
    if span is None or any(f[0] == path and span[1] <= f[1] <= span[2] for f in user_stack(record, rank) or ()):
        return None  # the stack shows the way through the function: no test on it
    for call in _calls_of(path, span[0]):
        got = rank_test([(path, call)], world)
        if got is not None and got.admits(rank):
            return got
    return None


@functools.lru_cache(maxsize=1024)
def _function_at(path: str, line: int) -> tuple[str, int, int] | None:
    """The innermost function whose body holds ``line``: (its name, its first and last line)."""
    tree = _tree(path)
    best = None
    for n in ast.walk(tree) if tree is not None else ():
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.lineno < line <= (n.end_lineno or 0):
            if best is None or n.lineno > best[1]:
                best = (n.name, n.lineno, n.end_lineno or n.lineno)
    return best


@functools.lru_cache(maxsize=1024)
def _calls_of(path: str, func: str) -> tuple[int, ...]:
    """The lines of ``path`` that call a function or method named ``func``, in order."""
    tree = _tree(path)
    out = set()
    for n in ast.walk(tree) if tree is not None else ():
        if isinstance(n, ast.Call):
            f = n.func
            if (f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None) == func:
                out.add(n.lineno)
    return tuple(sorted(out))


def rank_guard(record: RunRecord, rank: int, site: tuple | list | None) -> tuple[str, int] | None:
    """The rank test that led ``rank`` to its call at ``site`` (``rank_test_of``, one it lets the rank take):
    its (file, line); None where none did."""
    t = rank_test_of(record, rank, site, record.world_size or len(record.ranks))
    return (t.file, t.test) if t is not None and t.admits(rank) else None


def guard_ranks(path: str, line: int, world: int) -> set[int] | None:
    """The ranks for which the ``if`` at ``line`` can be true, from its rank comparisons
    (``rank == 0 and batch == 2`` -> {0}); None when the test does not say."""
    tree = _tree(path)
    node = next((n for n in ast.walk(tree) if isinstance(n, ast.If) and n.lineno == line), None) if tree else None
    if node is None or world <= 0:
        return None
    every = set(range(world))

    def ev(e: ast.AST) -> set[int] | None:
        if isinstance(e, ast.BoolOp):
            parts = [ev(v) for v in e.values]
            known = [p for p in parts if p is not None]
            if not known:
                return None
            if isinstance(e.op, ast.And):
                return set.intersection(*known)
            return None if len(known) < len(parts) else set.union(*known)
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            inner = ev(e.operand)
            return None if inner is None else every - inner
        if isinstance(e, ast.Compare) and len(e.ops) == 1 and "rank" in ast.unparse(e.left).lower():
            c = e.comparators[0]
            try:
                val = ast.literal_eval(c)
            except ValueError:
                return None
            op = e.ops[0]
            if isinstance(val, int):
                tests = {
                    ast.Eq: lambda r: r == val,
                    ast.NotEq: lambda r: r != val,
                    ast.Lt: lambda r: r < val,
                    ast.LtE: lambda r: r <= val,
                    ast.Gt: lambda r: r > val,
                    ast.GtE: lambda r: r >= val,
                }
                fn = tests.get(type(op))
                return {r for r in every if fn(r)} if fn else None
            if isinstance(val, (tuple, list, set)) and isinstance(op, (ast.In, ast.NotIn)):
                return {r for r in every if (r in val) == isinstance(op, ast.In)}
        return None

    return ev(node.test)
