"""The evidence memleak judges, and the words it judges with (pure): each rank's per-step memory lines and
censuses, the thresholds a growing series must pass (``leaking``), which ranks grow (``rank_set``, ``who``),
and the phrases every memleak finding shares (sizes, holders, when the host or GPU is full). ``growth.py``
(Python memory) and ``cuda.py`` (GPU memory) both build on it; ``memleak/__init__.py`` runs them in order.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from ddpdoctor.analysis.findings import rank_list
from ddpdoctor.analysis.series import growth
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

MIN_SPAN_STEPS = 16  # a growth is judged over at least this many steps after the warm-up (a few points of
# a short run, 9 -> 10 -> 16 graph nodes over steps 2-8, are the first steps settling, not a leak)


# a count (tensors of a kind, graph nodes) whose last points stay at one value over this share of the series'
# steps or more has stopped growing. Counts only: RSS grows in allocator chunks and is flat between them
FLAT_TAIL_MAX = 0.25


def leaking(g: dict[str, float] | None, min_slope: float, min_total: float, count: bool = False) -> bool:
    return bool(
        g
        and g["steps"] >= MIN_SPAN_STEPS
        and (not count or g.get("flat_tail", 0.0) < FLAT_TAIL_MAX)
        and g["late_slope"] >= min_slope
        and g["late_total"] >= min_total
        and g["up_fraction"] >= 0.5
        and g.get("above_prior", min_total) >= min_total / 2
    )


def census(record: RunRecord) -> dict[int, list[dict[str, Any]]]:
    """Censuses per rank. The one taken after the script returned (``final``) counts only when it still
    sees what the previous one saw: a script whose loop lives in a function has freed its locals by then,
    and that drop is not the leak ending."""
    out = {}
    for r, rec in record.ranks.items():
        cs: list[dict[str, Any]] = []
        for e in rec.memory:
            if e.get("kind") != schema.K_CENSUS:
                continue
            if (
                e.get("final")
                and cs
                and (
                    e.get("tensors", 0) < cs[-1].get("tensors", 0)
                    or e.get("graph_nodes", 0) < cs[-1].get("graph_nodes", 0)
                )
            ):
                continue
            cs.append(e)
        out[r] = cs
    return out


def shortfall(record_memory: list[dict[str, Any]]) -> str | None:
    """Why a rank's censuses may lack the evidence (issue 37), from its memory records: the floor of
    censuses skipped (the probes' CPU share was at its cap: the rank's CPU was saturated), or holder searches
    cut at their CPU cap. None when the rank's probes took every census and search they wanted."""
    skipped = capped = 0
    for e in record_memory:
        k = e.get("kind")
        if k == schema.K_CENSUS:
            skipped = max(skipped, int(e.get("floor_skipped") or 0))
            capped += sum(1 for g in e.get("grown") or () if g.get("search") == "capped")
        elif k == schema.K_MEM_OVERHEAD:
            skipped = max(skipped, int(e.get("floor_skipped") or 0))
    if skipped:
        return f"ranks' CPU was saturated ({skipped} census(es) of the floor skipped at the probes' CPU cap)"
    if capped:
        return f"ranks' CPU was saturated (the search reached its CPU-time cap {capped} time(s))"
    return None


def skipped_note(what: str, record: RunRecord | None, ranks: list[int]) -> tuple[str, dict[str, str]]:
    """The message's clause and the evidence for the ranks whose ``what`` (holder search, census) could not
    be afforded: "; holder search skipped on rank(s) [1]: ranks' CPU was saturated (...)"."""
    if record is None:
        return "", {}
    why = {r: w for r in ranks if r in record.ranks and (w := shortfall(record.ranks[r].memory))}
    if not why:
        return "", {}
    first = next(iter(why.values()))
    return f"; {what} skipped on rank(s) {rank_list(sorted(why))}: {first}", {str(r): w for r, w in why.items()}


def steps(record: RunRecord) -> dict[int, list[dict[str, Any]]]:
    return {r: [e for e in rec.memory if e.get("kind") == schema.K_MEM] for r, rec in record.ranks.items()}


def who(ranks: list[int], all_ranks: list[int], unknown: list[int] | None = None) -> str:
    """Which ranks grow. "only on rank(s) ..." is said only when every other rank was seen flat over the
    same steps (``unknown``: the ranks whose series could not tell)."""
    if len(ranks) == len(all_ranks):
        return "on every rank"
    if unknown:
        return (
            f"on rank(s) {rank_list(ranks)} of {len(all_ranks)} (rank(s) {rank_list(unknown)}: too few samples "
            "to tell whether they grow too)"
        )
    return f"on only rank(s) {rank_list(ranks)} of {len(all_ranks)} (rank-conditional code; the others stay flat)"


def rank_set(
    hits: dict[int, dict[str, float]], series: dict[int, list[list[tuple[float, float]]]], ranks: list[int]
) -> tuple[list[int], list[int]]:
    """Every rank whose memory grows, and those that cannot be told: a rank the thresholds missed (a series
    with fewer points, a slower loop) still grows when its later slope is a good part of the growing ranks';
    it is flat when its later half barely moves against theirs over the same steps."""
    if not hits:
        return [], []
    slope = median(g["late_slope"] for g in hits.values())
    total = median(g["late_total"] for g in hits.values())
    lo = min(g["first_step"] for g in hits.values())
    hi = max(g["last_step"] for g in hits.values())
    growing, unknown = set(hits), []
    for r in ranks:
        if r in hits:
            continue
        verdict = "unknown"
        for pts in series.get(r, []):
            g = growth([p for p in pts if p[0] >= lo - (hi - lo)])
            if g is None or g["last_step"] - g["first_step"] < (hi - lo) / 2:
                continue
            # growth of its own, not a wobble: a third of the growing ranks' rate and rise, new highs late
            if (
                g["late_slope"] >= slope / 3
                and g["late_total"] >= total / 3
                and g["up_fraction"] >= 0.5
                and g["above_prior"] > 0
            ):
                verdict = "grows"
                break
            if g["late_slope"] <= slope / 10:
                verdict = "flat"
        if verdict == "unknown" and any(_level(pts, lo, hi, total) for pts in series.get(r, [])):
            verdict = "flat"
        if verdict == "grows":
            growing.add(r)
        elif verdict == "unknown":
            unknown.append(r)
    return sorted(growing), unknown


def _level(pts: list[tuple[float, float]], lo: float, hi: float, total: float) -> bool:
    """A series that stays level over the growing ranks' steps, however sparse: points from before the middle
    of [lo, hi] to its last quarter or later, and no more rise among them than a tenth of the growing ranks'
    late rise. A flat rank's graph scans go rare (their budget shrinks while nothing grows) and its censuses
    thin out after the early doublings; its final census still sees the same level at the end."""
    near = [p for p in pts if p[0] >= lo - (hi - lo)]
    if len(near) < 3 or near[0][0] > (lo + hi) / 2 or near[-1][0] < hi - (hi - lo) / 4:
        return False
    ys = [p[1] for p in near]
    return max(ys) - min(ys) <= total / 10


def short(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def held(h: dict[str, Any]) -> str:
    """A holder as the user writes it, where: "`self._epoch_logits` (EpochLogits.on_train_batch_end, x.py:24)"."""
    func = h.get("func") or ""
    owner = h.get("owner")
    where = f"{owner}.{func}" if owner and func and func != "<module>" else func
    at = f"{short(h['file'])}:{h['line']}"
    return f"`{h['name']}` ({where}, {at})" if where else f"`{h['name']}` ({at})"


def mb(x: float) -> str:
    from ddpdoctor.units import size

    return size(x)  # as `compare` writes it


def project(steps: list[dict[str, Any]], census: list[dict[str, Any]], per_step: float, key: str) -> str:
    if per_step <= 0:
        return ""
    if key == "cuda":
        last = steps[-1] if steps else {}
        free = (last.get("nvml_total") or 0) - (last.get("nvml_used") or 0)
        where = "the GPU"
    else:
        free = (census[-1].get("host_available") or 0) if census else 0
        where = "the host"
    if free <= 0:
        return ""
    steps_left = free / per_step
    if steps_left > FULL_HORIZON:  # beyond any run: a count of millions of steps says nothing
        return ""
    return f"; at this rate {where} is full in about {about(steps_left)} more steps"


FULL_HORIZON = 1_000_000  # steps: "full in N more steps" is said only within this


def about(n: float) -> str:
    """A count to two significant figures: 12,000 (not 12,345), 830."""
    from math import floor, log10

    if n < 100:
        return str(max(1, round(n)))
    k = 10 ** (floor(log10(n)) - 1)
    return f"{int(round(n / k) * k):,}"
