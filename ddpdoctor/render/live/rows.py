"""The rows of the live view, pure: :func:`build_view` turns a RunRecord, ``now``, a Config and the step
history (:class:`Rates`) into a :class:`View`: one row per rank or, past ``MAX_RANK_ROWS`` ranks, one row
per group of ranks in the same state plus the slowest ranks (a bounded table at any world size). The
presenters are in :mod:`ddpdoctor.render.live.terminal`."""

from __future__ import annotations

import dataclasses
import os
import statistics
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import rank_list
from ddpdoctor.analysis.state import RankState, all_states, describe_op, hb_steps, steps_of
from ddpdoctor.record.reader import RunRecord

WINDOW_S = 5.0  # steps/s over the heartbeats of the last few seconds
MAX_RANK_ROWS = 16  # up to this many ranks: one row each; beyond: groups by state + the slowest ranks
MAX_GROUPS = 8
N_SLOWEST = 3


@dataclass(frozen=True)
class Row:
    """One line of the table: a rank, or a group of ranks in the same state."""

    label: str  # "rank 3", "1021 ranks [0-2,4-1020,...]"
    ranks: tuple[int, ...]
    step: str
    rate: str  # steps/s
    ncoll: str  # collectives issued
    state: str  # running | in all_reduce #16 | waiting 12 s in barrier #16 | exited 0 | not started ...
    where: str  # file:line
    kind: str  # running | waiting | ended | crashed | not-started | stale (the presenter's colour)
    note: str = ""  # "slowest" for an outlier row


@dataclass(frozen=True)
class View:
    """The whole table at one moment: its title, rows and the ranks per kind."""

    title: str
    rows: tuple[Row, ...]
    n_ranks: int
    counts: tuple[tuple[str, int], ...]  # ranks per kind
    hidden: int = 0  # groups not shown


class Rates:
    """Each rank's (heartbeat time, step) over the last ``window`` seconds, fed by the monitor at every poll."""

    def __init__(self, window: float = WINDOW_S) -> None:
        self.window = window
        self.hist: dict[int, deque[tuple[float, int]]] = {}

    def observe(self, record: RunRecord) -> None:
        """Take each rank's latest heartbeat (time, step) into its history."""
        for r, rec in record.ranks.items():
            hb = rec.last_hb
            if not hb:
                continue
            t, step = float(hb.get("t") or 0.0), hb_steps(hb)
            h = self.hist.setdefault(r, deque(maxlen=256))
            if not h or t > h[-1][0]:
                h.append((t, step))
            while len(h) > 2 and h[-1][0] - h[1][0] >= self.window:
                h.popleft()

    def rate(self, rank: int) -> float | None:
        """Steps per second of ``rank`` over the window; None with too little history."""
        h = self.hist.get(rank)
        if not h or len(h) < 2 or h[-1][0] - h[0][0] < 0.5:
            return None
        return max(0.0, (h[-1][1] - h[0][1]) / (h[-1][0] - h[0][0]))


def _short(path: str) -> str:
    return os.path.basename(path) if path else "?"


def _where(s: RankState) -> str:
    if s.state == "finished" and not s.exit_code:
        return ""  # a rank that ended well is at no line of the script
    return f"{_short(s.where.file)}:{s.where.line}" if s.where else ""


def _state(s: RankState, now: float) -> tuple[str, str, str]:
    """(kind, text with durations, text without them: the grouping key)."""
    if s.state == "not-started":
        return "not-started", "not started", "not started"
    if s.state == "finished":
        return "ended", f"exited {s.exit_code if s.exit_code is not None else 0}", f"exited {s.exit_code}"
    if s.state == "crashed":
        code = f" (exit {s.exit_code})" if s.exit_code not in (None, 0) else ""
        return "crashed", f"crashed{code}", f"crashed{code}"
    if s.state == "gone":
        return "crashed", "gone", "gone"
    if s.stale:
        age = now - s.hb_t if s.hb_t else None
        return "stale", f"no heartbeat {age:.0f} s" if age else "no heartbeat", "no heartbeat"
    if s.state == "waiting":
        p = s.pending or {}
        what = f"{describe_op(p.get('op'))} #{p.get('seq')}"
        waited = now - s.since if s.since else 0.0
        text = f"waiting {waited:.0f} s in {what}" if waited >= 1.0 else f"in {what}"
        return "waiting", text, f"in {what}"
    if s.state == "ddp-wait" and s.seq_stable_for >= 2.0:
        return "waiting", f"waiting {s.seq_stable_for:.0f} s in DDP backward", "in DDP backward"
    if s.stalled_for >= 10.0:
        return "running", f"running, no progress {s.stalled_for:.0f} s", "running, no progress"
    return "running", "running", "running"


def _collectives(hb: dict[str, Any], s: RankState) -> int:
    """Collectives issued: the process groups' sequence numbers (DDP's own all-reduces count), else the
    Python-level count."""
    seq = s.seq or hb.get("seq") or {}
    try:
        total = sum(int(v) for v in seq.values())
    except (TypeError, ValueError, AttributeError):
        total = 0
    return total or int(hb.get("ncoll") or 0)


def _label(ranks: list[int], limit: int = 40) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    text = rank_list(ranks)
    if len(text) > limit:
        text = text[: limit - 5].rsplit(",", 1)[0] + ",...]"
    return f"{len(ranks)} ranks {text}"


def _span(vals: list[int]) -> str:
    lo, hi = min(vals), max(vals)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _rate_text(r: float | None) -> str:
    return "" if r is None else f"{r:.1f}" if r < 100 else f"{r:.0f}"


def view_to_dict(view: View) -> dict[str, Any]:
    """A view as JSON-ready data: the judge of a multi-node job shares the job's table with the other nodes."""
    return dataclasses.asdict(view)


def view_from_dict(d: Any, title: str | None = None) -> View | None:
    """The view of :func:`view_to_dict` (``title`` replaces its title); None when ``d`` is not one (a value
    from the store is checked, never trusted)."""
    try:
        rows = tuple(
            Row(
                label=str(r["label"]),
                ranks=tuple(int(x) for x in r["ranks"]),
                step=str(r["step"]),
                rate=str(r["rate"]),
                ncoll=str(r["ncoll"]),
                state=str(r["state"]),
                where=str(r["where"]),
                kind=str(r["kind"]),
                note=str(r.get("note") or ""),
            )
            for r in d["rows"]
        )
        counts = tuple((str(k), int(n)) for k, n in d["counts"])
        return View(
            str(d["title"]) if title is None else title, rows, int(d["n_ranks"]), counts, int(d.get("hidden") or 0)
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def build_view(
    record: RunRecord,
    now: float,
    cfg: Config,
    rates: Rates | None = None,
    title: str = "",
    states: dict[int, RankState] | None = None,
) -> View:
    """The table's rows at ``now``: one per rank up to MAX_RANK_ROWS ranks, else groups and outliers.
    ``states``: ``all_states(record, now, cfg)`` when the caller has it already (the judge of a job)."""
    states = states if states is not None else all_states(record, now, cfg)
    info: dict[int, tuple[RankState, str, str, str, int, int, float | None]] = {}
    for r, s in sorted(states.items()):
        kind, text, key = _state(s, now)
        ncoll = _collectives(record.ranks[r].last_hb or {}, s)
        info[r] = (s, kind, text, key, steps_of(record.ranks[r]), ncoll, rates.rate(r) if rates else None)
    counts = Counter(v[1] for v in info.values())
    world = max(record.world_size or 0, len(info))
    head = title + (" · " if title else "") + f"{world} rank{'s' if world != 1 else ''}"
    order = ("running", "waiting", "stale", "crashed", "ended", "not-started")
    count_t = tuple((k, counts[k]) for k in order if counts.get(k))
    if len(info) <= MAX_RANK_ROWS:
        rows = tuple(
            Row(f"rank {r}", (r,), str(step), _rate_text(rate), str(nc), text, _where(s), kind)
            for r, (s, kind, text, _k, step, nc, rate) in info.items()
        )
        return View(head, rows, world, count_t)

    # many ranks: groups of the same state (and, for waits and ends, the same line), smallest first
    groups: dict[tuple[str, str, str], list[int]] = {}
    for r, (s, kind, _t, key, *_rest) in info.items():
        where = "" if kind == "running" else _where(s)
        groups.setdefault((kind, key, where), []).append(r)
    ordered = sorted(groups.items(), key=lambda kv: (len(kv[1]), kv[1][0]))
    shown, hidden = ordered[:MAX_GROUPS], ordered[MAX_GROUPS:]
    rows_l: list[Row] = []
    for (kind, key, where), rs in sorted(
        shown, key=lambda kv: (order.index(kv[0][0]) if kv[0][0] in order else 9, len(kv[1]), kv[1][0])
    ):
        steps = [info[r][4] for r in rs]
        ncs = [info[r][5] for r in rs]
        rts = [x for r in rs if (x := info[r][6]) is not None]
        if len(rs) == 1:
            text = info[rs[0]][2]
        elif kind == "waiting" and key.startswith("in "):
            waited = [now - info[r][0].since for r in rs if info[r][0].since]  # type: ignore[operator]
            text = f"waiting {max(waited):.0f} s {key}" if waited and max(waited) >= 1.0 else key
        else:
            text = key
        if not where:
            lines = Counter(_where(info[r][0]) for r in rs if info[r][0].where)
            if lines:
                top, _n = lines.most_common(1)[0]
                where = top + (f" (+{len(lines) - 1} lines)" if len(lines) > 1 else "")
        rows_l.append(
            Row(
                _label(rs),
                tuple(rs),
                _span(steps),
                _rate_text(statistics.median(rts)) if rts else "",
                _span(ncs),
                text,
                where,
                kind,
            )
        )
    # the slowest ranks still going: the fewest steps (then the lowest rate), when some are behind
    going = [r for r, v in info.items() if v[1] in ("running", "waiting", "stale")]
    if going:
        most = max(info[r][4] for r in going)
        behind = sorted(
            (r for r in going if info[r][4] < most),
            key=lambda r: (info[r][4], info[r][6] if info[r][6] is not None else 0.0, r),
        )
        for r in behind[:N_SLOWEST]:
            s, kind, text, _k, step, nc, rate = info[r]
            rows_l.append(
                Row(f"rank {r}", (r,), str(step), _rate_text(rate), str(nc), text, _where(s), kind, "slowest")
            )
    return View(head, tuple(rows_l), world, count_t, len(hidden))
