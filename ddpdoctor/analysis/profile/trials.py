"""Short trials judged against an A/A control (``ddpdoctor tune``, ``profile --scaling``). Pure.

One run of the script is an *arm*; what an arm measures (``RunFigures``) is read from the profile probe's own
records of that run: the typical steady step (``steps.typical_step``, the warm-up fifth skipped), its parts,
DDP's backward timers and the samples per optimizer step.

The rule for a knob (``judge``): every repetition runs two baseline arms (A and A', the script unchanged) and
every knob arm, in an order rotated by one place per repetition (``rotated``), so that no arm always runs
first or beside the same neighbour. The A/A spread is the largest relative difference between A and A' in any
repetition: what the machine's noise alone does to two identical runs. A knob's gain counts only when in
*every* repetition the arm beats that repetition's baseline (the mean of A and A') by more than the A/A
spread; a loss likewise; anything else is "within noise".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from ddpdoctor.analysis.profile.steps import breakdown, steady, typical_step
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

FASTER, SLOWER, NOISE, FAILED = "faster", "slower", "within noise", "failed"


def rotated(arms: Sequence[str], rep: int) -> list[str]:
    """The order of the arms in repetition ``rep``: the list rotated left by ``rep`` places."""
    if not arms:
        return []
    k = rep % len(arms)
    return [*arms[k:], *arms[:k]]


@dataclass(frozen=True)
class RunFigures:
    """What one arm measured (ms; None where the records do not say)."""

    world_size: int
    step_ms: float  # the typical steady step of the slowest rank
    spread_ms: float  # the interquartile range of that rank's steady steps
    steps: int  # steady steps measured (on that rank)
    parts: dict[str, float]  # that step's phases (steps.PHASES)
    samples_per_step: int | None  # every rank's samples per optimizer step, summed (micro-batches included)
    per_rank_samples: int | None  # the same, one rank's (the most common)
    exposed_ms: float | None  # DDP's timers: gradient all-reduce after the backward compute ended (median rank)
    wait_ms: float | None  # of which: waiting for the slowest rank's backward compute (mean over ranks)
    comm_ms: float | None  # DDP's gradient all-reduce time (median rank)
    buckets: tuple[int, ...] = ()
    bucket_cap_mb: float | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # what the tune records said (script's DDP args, loaders, hook)


def _latest(timeline: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next((e for e in reversed(timeline) if e.get("kind") == kind), {})


def ddp_exposed(record: RunRecord) -> tuple[float | None, float | None, float | None]:
    """(exposed, wait for the slowest rank, comm) in ms from DDP's own timers: per rank, comm minus its
    overlap with the backward compute is the all-reduce time after the backward compute ended; a rank whose
    backward compute is shorter than the slowest rank's waits that difference inside it."""
    timers = {}
    for r, rec in record.ranks.items():
        d = _latest(rec.timeline, schema.K_PROFILE_INFO).get("ddp") or {}
        if isinstance(d.get("comm_ms"), (int, float)) and isinstance(d.get("backward_ms"), (int, float)):
            timers[r] = d
    if not timers:
        return None, None, None
    exposed = [max(0.0, float(d["comm_ms"]) - float(d.get("overlap_ms") or 0.0)) for d in timers.values()]
    compute = [float(d["backward_ms"]) for d in timers.values()]
    slowest = max(compute)
    wait = sum(slowest - c for c in compute) / len(compute)
    return median(exposed), min(wait, median(exposed)), median(float(d["comm_ms"]) for d in timers.values())


def figures_of(record: RunRecord) -> RunFigures | None:
    """The arm's figures, or None when no rank has a steady step (the run failed or made no step)."""
    per_rank = {}
    for r, rec in record.ranks.items():
        rows = steady(breakdown(rec.timeline))
        if rows:
            per_rank[r] = (typical_step(rows), sorted(x["step"] for x in rows))
    if not per_rank:
        return None
    slow = max(per_rank, key=lambda r: per_rank[r][0]["step"])
    typ, times = per_rank[slow]
    q = len(times) // 4
    counts = []
    for rec in record.ranks.values():
        ss = _latest(rec.timeline, schema.K_PROFILE_INFO).get("step_samples") or {}
        if ss:
            counts.append(int(max(ss.items(), key=lambda kv: (kv[1], int(kv[0])))[0]))
    info = _latest(record.ranks[slow].timeline, schema.K_PROFILE_INFO)
    exposed, wait, comm = ddp_exposed(record)
    t0 = record.ranks[min(record.ranks)].timeline
    facts = {
        "ddp": _latest(t0, schema.K_TUNE_DDP),
        "loader": _latest(t0, schema.K_TUNE_LOADER),
        "hook": _latest(t0, schema.K_TUNE_HOOK),
    }
    return RunFigures(
        world_size=record.world_size or len(record.ranks),
        step_ms=typ["step"],
        spread_ms=(times[len(times) - 1 - q] - times[q]) if len(times) >= 4 else (times[-1] - times[0]),
        steps=len(times),
        parts={k: v for k, v in typ.items() if k not in ("step", "steps")},
        samples_per_step=sum(counts) if counts and len(counts) == len(record.ranks) else None,
        per_rank_samples=int(median(counts)) if counts else None,
        exposed_ms=exposed,
        wait_ms=wait,
        comm_ms=comm,
        buckets=tuple(int(b) for b in info.get("buckets") or ()),
        bucket_cap_mb=info.get("bucket_cap_mb"),
        facts=facts,
    )


@dataclass(frozen=True)
class Judgement:
    """One knob's verdict against the A/A control: the per-repetition gains (fractions of the baseline,
    positive = faster) and the A/A spread they were held against."""

    verdict: str
    gains: tuple[float, ...]
    aa_spread: float

    @property
    def median_gain(self) -> float:
        return median(self.gains) if self.gains else 0.0


def aa_spread(a: Sequence[float], b: Sequence[float]) -> float:
    """The largest relative difference between the two baseline arms of a repetition."""
    return max((abs(x - y) / ((x + y) / 2) for x, y in zip(a, b)), default=0.0)


def judge(a: Sequence[float], b: Sequence[float], arm: Sequence[float | None]) -> Judgement:
    """The knob arm's verdict: FASTER when every repetition's gain over its baseline (the mean of A and A')
    exceeds the A/A spread, SLOWER when every loss does, FAILED when an arm made no steady step, else NOISE."""
    spread = aa_spread(a, b)
    if not arm or any(x is None for x in arm) or len(arm) != len(a):
        return Judgement(FAILED, (), spread)
    gains = tuple(((x + y) / 2 - float(t)) / ((x + y) / 2) for x, y, t in zip(a, b, arm) if t is not None)
    if len(gains) >= 2 and min(gains) > spread:
        return Judgement(FASTER, gains, spread)
    if len(gains) >= 2 and max(gains) < -spread:
        return Judgement(SLOWER, gains, spread)
    return Judgement(NOISE, gains, spread)


def best(judged: dict[str, Judgement]) -> str | None:
    """The arm to recommend: the FASTER one with the largest median gain (a sweep's arms compete; the
    others are alternatives), or None when no arm counts."""
    faster = [(j.median_gain, name) for name, j in judged.items() if j.verdict == FASTER]
    return max(faster)[1] if faster else None
