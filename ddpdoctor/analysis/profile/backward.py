"""A straggler whose extra time is inside backward. Pure.

DDP's gradient all-reduce makes every rank's backward as long as the slowest rank's, so the step
breakdown (``backward+comm``) reads the same on every rank and :mod:`ddpdoctor.analysis.profile.breakdown` cannot
name the slow one there. DDP's own timers (``profile_info``'s ``ddp``: ``backward_ms`` is the backward
*compute*, from its start to the last gradient ready; ``comm_ms`` the gradient all-reduce) separate them:
the slow rank computes long and its all-reduce is short, the others compute briefly and wait in their
all-reduce. The line sampler (CPU backward runs on the thread that called ``backward()``; a custom
autograd Function's ``backward`` is a user line) says where the slow rank's time goes.
"""

from __future__ import annotations

from statistics import median, median_low
from typing import Any

from ddpdoctor.analysis.findings import Finding, Location, rank_list, ranks_phrase
from ddpdoctor.analysis.ids import PROFILE_STRAGGLER
from ddpdoctor.analysis.profile.steps import Hot, Samples, _short, samples_of, typical
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

PHASE = "backward+comm"
SHARE = 0.10  # the culprit's extra backward compute above this share of the median step ...
MIN_MS = 5.0  # ... and above this many ms (the thresholds of profile.straggler)
HINT = (
    "Look at what only the slow rank computes in backward (a custom autograd Function, hooks on its "
    "parameters or tensors, a slower device, larger inputs); DDP's all-reduce makes every rank wait for it."
)


def ddp_timers(record: RunRecord) -> dict[int, dict[str, float]]:
    """Per rank, DDP's own backward timers (ms) from its latest ``profile_info`` that has them."""
    out = {}
    for r, rec in record.ranks.items():
        for e in reversed(rec.timeline):
            if e.get("kind") == schema.K_PROFILE_INFO and isinstance(e.get("ddp"), dict):
                d = e["ddp"]
                if isinstance(d.get("backward_ms"), (int, float)) and isinstance(d.get("comm_ms"), (int, float)):
                    out[r] = {"compute": float(d["backward_ms"]), "comm": float(d["comm_ms"])}
                    break
    return out


def _line(r: int, med: dict[int, dict[str, float]], samples: dict[int, Samples], peers: list[int]) -> Hot | None:
    """The culprit's backward line with the most ms per step beyond what its peers spend at that line."""
    best, best_x = None, 0.0
    for h in samples[r].hot(PHASE, med[r][PHASE]):
        if h.count < 2:
            continue
        theirs = [samples[o].ms_at(PHASE, (h.file, h.line), med[o][PHASE]) for o in peers if o in med]
        x = h.ms - (median(theirs) if theirs else 0.0)
        if x > best_x:
            best, best_x = h, x
    return best


def detect(record: RunRecord) -> list[Finding]:
    """profile.straggler for the ranks whose backward compute (DDP's timers) exceeds the others'."""
    timers = ddp_timers(record)
    med = {r: m for r, m in typical(record).items() if r in timers}
    if len(med) < 2:
        return []
    step = median(m["step"] for m in med.values())
    thr = max(MIN_MS, SHARE * step)
    base = median_low(timers[r]["compute"] for r in med)
    slow = {r: timers[r]["compute"] - base for r in med if timers[r]["compute"] - base >= thr}
    if not slow or 2 * len(slow) >= len(med) + 1:
        return []  # nobody, or most ranks: no straggler to single out
    culprits = sorted(slow)
    others = sorted(r for r in med if r not in slow)
    # the others must show it: they wait in the all-reduce while the culprits compute
    waits = {r: timers[r]["comm"] - median(timers[c]["comm"] for c in culprits) for r in others}
    if median(waits.values()) < thr / 2:
        return []
    samples = {r: samples_of(record.ranks[r].timeline) for r in med}
    worst = max(culprits, key=lambda r: slow[r])
    locs: list[Location] = []
    hot: dict[int, Hot] = {}
    for r in culprits:
        h = _line(r, med, samples, others)
        if h is not None:
            hot[r] = h
            locs.append(Location(r, h.file, h.line, h.func, "slow"))
    xs = [slow[r] for r in culprits]
    who = f"rank {worst} is" if len(culprits) == 1 else f"{ranks_phrase(culprits)} are"
    span = f"{xs[0]:.0f}" if len(xs) == 1 else f"{min(xs):.0f}-{max(xs):.0f}"
    msg = (
        f"{who} {span} ms/step slower than the others in backward (DDP's timers: backward compute "
        f"{timers[worst]['compute']:.1f} ms vs {base:.1f} ms)"
    )
    h = hot.get(worst)
    if h is not None:
        fn = f" in {h.func}" if h.func and h.func != "<module>" else ""
        text = f" (`{h.text}`, ~{h.ms:.0f} ms/step)" if h.text else f" (~{h.ms:.0f} ms/step)"
        msg += f", at {_short(h.file)}:{h.line}{fn}{text}"
    wait_line: Hot | None = None
    for r in others:
        hs = [x for x in samples[r].hot(PHASE, med[r][PHASE]) if x.count >= 2]
        if hs:
            locs.append(Location(r, hs[0].file, hs[0].line, hs[0].func, "waiting"))
            wait_line = wait_line or hs[0]
    verb = "waits" if len(others) == 1 else "wait"
    msg += f"; {ranks_phrase(others)} {verb} for {'it' if len(culprits) == 1 else 'them'} in DDP's gradient all-reduce"
    if wait_line is not None:
        msg += f" at {_short(wait_line.file)}:{wait_line.line}" + (f" (`{wait_line.text}`)" if wait_line.text else "")
    msg += f", +{median(waits.values()):.0f} ms/step"
    ev: dict[str, Any] = {
        "rank": worst,
        "phase": "backward",
        "excess_ms": round(slow[worst], 2),
        "step_ms": step,
        "threshold_ms": thr,
        "culprits": rank_list(culprits),
        "excess_by_rank": {str(r): round(slow[r], 2) for r in culprits},
        "line": [h.file, h.line, h.func] if h else None,
        "line_ms": round(h.ms, 2) if h else None,
        "ddp_timers_ms": {str(r): timers[r] for r in med} if len(med) <= 64 else {},
        "wait_ms": {str(r): round(w, 2) for r, w in waits.items()}
        if len(others) <= 64
        else {"median": round(median(waits.values()), 2)},
    }
    return [
        Finding(
            PROFILE_STRAGGLER,
            "warning",
            msg,
            HINT,
            tuple(sorted(med)),
            tuple(locs[:64]),
            ev,
            culprits=tuple(culprits),
        )
    ]


def add(findings: list[Finding], record: RunRecord) -> list[Finding]:
    """The profile findings, with a backward straggler when no other straggler was named."""
    if not findings or any(f.id == PROFILE_STRAGGLER for f in findings):
        return findings
    return detect(record) + findings
