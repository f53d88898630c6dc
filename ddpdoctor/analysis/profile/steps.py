"""What one rank's timeline says: the phases of each step (ms), the typical steady step, and the line samples per phase. Pure."""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

PHASES = ("data", "forward", "backward+comm", "optimizer", "collective", "other")
_PHASE_OF = {
    "dataloader wait": "data",
    "forward": "forward",
    "backward": "backward+comm",
    "optimizer step": "optimizer",
}

_SAMPLE_PHASE = {
    "data": "data",
    "forward": "forward",
    "backward": "backward+comm",
    "optimizer": "optimizer",
    "collective": "collective",
}

_RANGE_WORDS = {
    "dataloader wait": "data loading",
    "forward": "forward",
    "backward": "backward",
    "optimizer step": "optimizer step",
}

_AFTER = {"data": "dataloader wait", "forward": "forward", "backward": "backward", "optimizer": "optimizer step"}


# FSDP2's and FSDP1's collectives on the training thread (rank/probes/profile/timeline.py): inside forward
# and backward, a part of those phases, told apart in the summary (``fsdp_comm``); all-reduce: FSDP1's NO_SHARD
FSDP_RANGES = {
    "fsdp all-gather": "all-gather",
    "fsdp reduce-scatter": "reduce-scatter",
    "fsdp all-reduce": "all-reduce",
}


def _is_collective(e: dict[str, Any]) -> bool:
    name = str(e.get("name", ""))
    return e.get("cat") == "comm" and not name.startswith("all_reduce bucket") and name not in FSDP_RANGES


def fsdp_comm(timeline: list[dict[str, Any]]) -> dict[str, float]:
    """FSDP's all-gather, reduce-scatter (and FSDP1 NO_SHARD's all-reduce) time per steady step (ms, the
    median over the steady steps, as ``steady`` picks them), for the kinds the timeline has; {} without
    FSDP ranges."""
    ranges = [e for e in timeline if e.get("kind") == schema.K_RANGE]
    fsdp = sorted((e for e in ranges if e.get("name") in FSDP_RANGES), key=lambda e: e["t0"])
    if not fsdp:
        return {}
    steps = steady(sorted((e for e in ranges if e.get("name") == "step"), key=lambda e: e["t0"]))  # type: ignore[arg-type]
    seen = {FSDP_RANGES[e["name"]] for e in fsdp}
    per: dict[str, list[float]] = {k: [] for k in FSDP_RANGES.values() if k in seen}
    for st in steps:
        sums = dict.fromkeys(per, 0.0)
        for e in fsdp:
            if st["t0"] <= e["t0"] < st["t1"]:
                sums[FSDP_RANGES[e["name"]]] += (e["t1"] - e["t0"]) / 1e6
        for k, v in sums.items():
            per[k].append(v)
    from statistics import median

    return {k: median(v) for k, v in per.items() if v}


def breakdown(timeline: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Per step: milliseconds per phase; ranges are assigned to the step they start in. A Python collective
    outside the other phases (a metric all_reduce, a barrier) is the phase "collective"."""
    ranges = [e for e in timeline if e.get("kind") == schema.K_RANGE]
    steps = sorted((e for e in ranges if e.get("name") == "step"), key=lambda e: e["t0"])
    main_tids = {e.get("tid") for e in steps}
    others = sorted(
        (e for e in ranges if e.get("name") in _PHASE_OF or (_is_collective(e) and e.get("tid") in main_tids)),
        key=lambda e: e["t0"],
    )
    out = []
    j = 0
    for st in steps:
        ph = dict.fromkeys(PHASES, 0.0)
        while j < len(others) and others[j]["t0"] < st["t0"]:
            j += 1
        k = j
        inside: list[dict[str, Any]] = []
        colls: list[dict[str, Any]] = []
        while k < len(others) and others[k]["t0"] < st["t1"]:
            e = others[k]
            if e["name"] in _PHASE_OF:
                ph[_PHASE_OF[e["name"]]] += (e["t1"] - e["t0"]) / 1e6
                inside.append(e)
            else:
                colls.append(e)
            k += 1
        for c in colls:  # a collective inside forward (SyncBatchNorm) or the optimizer is already counted
            if not any(i["t0"] <= c["t0"] and c["t1"] <= i["t1"] for i in inside):
                ph["collective"] += (c["t1"] - c["t0"]) / 1e6
        total = (st["t1"] - st["t0"]) / 1e6
        ph["other"] = max(0.0, total - sum(ph[p] for p in PHASES if p != "other"))
        ph["step"] = total
        out.append(ph)
    return out


def steady(rows: list[dict[str, float]]) -> list[dict[str, float]]:
    """The steady-state steps: the first fifth (at least one, the warm-up) dropped when enough remain."""
    skip = max(1, len(rows) // 5)
    return rows[skip:] if len(rows) > skip + 1 else rows


def typical_step(rows: list[dict[str, float]]) -> dict[str, float]:
    """The typical step of ``rows`` and its parts, one definition for every figure: the steps whose time lies
    in the middle half (between the quartiles, robust as a median is), each phase averaged over those same
    steps, and the step the sum of its phases, so the parts add up to the step exactly."""
    ranked = sorted(rows, key=lambda x: x["step"])
    q = len(ranked) // 4
    mid = ranked[q : len(ranked) - q] or ranked
    out = {p: sum(x[p] for x in mid) / len(mid) for p in PHASES}
    out["step"] = sum(out[p] for p in PHASES)
    return out


def rounded_parts(parts: dict[str, float], digits: int = 1) -> tuple[float, dict[str, float]]:
    """``parts`` and their sum rounded to ``digits`` so that the rounded parts still add up to the rounded
    sum (largest remainder: ``step 0.5 = a 0.3 + b 0.2``, not ``0.5 = 0.2 + 0.2`` for 0.25 + 0.25)."""
    import math

    scale = 10**digits
    total = round(sum(parts.values()) * scale)
    floors = {k: math.floor(v * scale) for k, v in parts.items()}
    short = total - sum(floors.values())  # 0 <= short <= len(parts): floors lose less than 1 each
    for k in sorted(parts, key=lambda k: parts[k] * scale - floors[k], reverse=True)[: max(0, short)]:
        floors[k] += 1
    return total / scale, {k: v / scale for k, v in floors.items()}


def typical(record: RunRecord) -> dict[int, dict[str, float]]:
    """Per rank, the typical steady step and its phases in ms (``typical_step``), and ``steps``: how many
    steady steps there were."""
    out = {}
    for r, rec in record.ranks.items():
        rows = steady(breakdown(rec.timeline))
        if rows:
            out[r] = typical_step(rows)
            out[r]["steps"] = float(len(rows))
    return out


@dataclass
class Hot:
    """One user line in one phase of one rank."""

    file: str
    line: int
    func: str
    count: int
    ms: float  # estimated ms per step at this line
    text: str = ""
    caller: tuple[str, int] | None = None
    after: str = ""  # for "other": the range that ended before it ("forward", ...)


@dataclass
class Samples:
    """A rank's sample counts: phase -> (file, line) -> count, plus func, caller, text and sub-position."""

    counts: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    total: Counter = field(default_factory=Counter)
    func: dict[tuple[str, int], str] = field(default_factory=dict)
    text: dict[tuple[str, int], str] = field(default_factory=dict)
    callers: dict[tuple[str, str, int], Counter] = field(default_factory=lambda: defaultdict(Counter))
    after: dict[tuple[str, int], Counter] = field(default_factory=lambda: defaultdict(Counter))

    def hot(self, phase: str, phase_ms: float) -> list[Hot]:
        """The phase's lines, most sampled first, with their estimated ms per step."""
        n = self.total[phase]
        out = []
        for (f, l), c in self.counts[phase].most_common():
            callers = self.callers.get((phase, f, l))
            caller = callers.most_common(1)[0][0] if callers else None
            after = self.after[(f, l)].most_common(1)[0][0] if phase == "other" and self.after.get((f, l)) else ""
            out.append(
                Hot(
                    f,
                    l,
                    self.func.get((f, l), ""),
                    c,
                    phase_ms * c / n if n else 0.0,
                    _code(self.text.get((f, l), "")),
                    caller,
                    after,
                )
            )
        return out

    def ms_at(self, phase: str, key: tuple[str, int], phase_ms: float) -> float:
        n = self.total[phase]
        return phase_ms * self.counts[phase].get(key, 0) / n if n else 0.0


def samples_of(timeline: list[dict[str, Any]]) -> Samples:
    """The line samples of one rank's timeline, summed per phase and line."""
    s = Samples()
    for e in timeline:
        if e.get("kind") != schema.K_SAMPLES:
            continue
        for row in e.get("rows") or []:
            if not isinstance(row, list) or len(row) < 8 or not isinstance(row[6], int):
                continue
            key, f, l, func, cf, cl, n, text = row[:8]
            phase = _SAMPLE_PHASE.get(key) or ("other" if str(key).startswith("other") else None)
            if phase is None:
                continue
            s.total[phase] += n
            if not isinstance(l, int) or f is None:
                continue
            s.counts[phase][(f, l)] += n
            if func:
                s.func[(f, l)] = func
            if text:
                s.text.setdefault((f, l), text)
            if cf is not None and isinstance(cl, int):
                s.callers[(phase, f, l)][(cf, cl)] += n
            if phase == "other":
                s.after[(f, l)][str(key).partition(":")[2]] += n
    return s


def _step_order(timeline: list[dict[str, Any]]) -> list[str]:
    """The main thread's phase ranges in one steady step, in order (``["dataloader wait", "forward", ...]``)."""
    ranges = [e for e in timeline if e.get("kind") == schema.K_RANGE]
    steps = sorted((e for e in ranges if e.get("name") == "step"), key=lambda e: e["t0"])
    if not steps:
        return []
    st = steps[len(steps) // 2]
    seq: list[str] = []
    for e in sorted(
        (e for e in ranges if e.get("name") in _PHASE_OF and st["t0"] <= e["t0"] < st["t1"]), key=lambda e: e["t0"]
    ):
        if not seq or seq[-1] != e["name"]:
            seq.append(e["name"])
    return seq


def _between(after: str, order: list[str]) -> str:
    """``between forward and backward`` for the 'other' time after the range ``after``."""
    prev = _AFTER.get(after)
    if prev is None or prev not in order:
        return f"before {_RANGE_WORDS[order[0]]}" if order and not after else ""
    i = order.index(prev)
    nxt = order[i + 1] if i + 1 < len(order) else order[0]
    if nxt == prev:
        return f"after {_RANGE_WORDS[prev]}"
    return f"between {_RANGE_WORDS[prev]} and {_RANGE_WORDS[nxt]}"


def _code(text: str) -> str:
    """A source line without its trailing comment."""
    import io
    import tokenize

    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                return text[: tok.start[1]].rstrip()
    except (tokenize.TokenError, SyntaxError, IndentationError):
        if "  #" in text:
            return text.split("  #", 1)[0].rstrip()
    return text


def _short(path: str) -> str:
    return os.path.basename(path)


def _line_phrase(h: Hot, loop_func: str | None = None) -> str:
    text = (
        f" (`{h.text}`" + (f", ~{h.ms:.0f} ms/step)" if h.ms >= 1 else ")")
        if h.text
        else (f" (~{h.ms:.0f} ms/step)" if h.ms >= 1 else "")
    )
    fn = f" in {h.func}" if h.func and h.func not in ("<module>", loop_func) else ""
    out = f"{_short(h.file)}:{h.line}{fn}{text}"
    if h.caller and fn:
        out += f", called from {_short(h.caller[0])}:{h.caller[1]}"
    return out
