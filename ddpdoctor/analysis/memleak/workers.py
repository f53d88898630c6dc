"""DataLoader workers whose private memory grows: copy-on-read of the Dataset's Python objects
(pytorch/pytorch#13246), or the workers' own allocations. Pure.

A forked worker starts sharing its parent's pages; reading a Python object writes its reference count and
copies the object's page into the worker. Each worker's USS (private pages) then grows towards a copy of
the objects it reads while its RSS stays flat (the pages were counted, shared, from the start). The copy
fills quickly and then stays: a plateau at a full copy per worker is the fault, so the growth is judged
from the worker's first samples to its level at the end (the median of its last samples), not from a late
slope. When RSS grows with USS, the workers allocate the memory themselves: that is reported only while it
still grows in the later half of the worker's life (a buffer that fills once is not a leak).
"""

from __future__ import annotations

from statistics import median
from typing import Any

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, Location, rank_list
from ddpdoctor.analysis.ids import MEMLEAK_DATALOADER_WORKERS
from ddpdoctor.analysis.series import growth
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

ID = MEMLEAK_DATALOADER_WORKERS
MIN_SAMPLES = 3  # samples of a worker before its growth is judged (the end level is the median of the last 3)
MIN_RISE = 16 * 2**20  # USS growth of one worker that counts (a worker reading numpy arrays moves by 1-2 MiB)
MIN_REL = 0.5  # ... and at least this share of the USS the worker started with
RSS_FLAT = 0.25  # RSS rose by less than this share of the USS growth (or less than RSS_FLAT_BYTES): flat
RSS_FLAT_BYTES = 8 * 2**20
LATE_RISE = 16 * 2**20  # the workers' own allocations: growth over the later half that counts
SHOWN = 4  # workers named in the message


def _mib(x: float) -> str:
    return f"{x / 2**20:.0f} MiB"


def _series(record: RunRecord) -> tuple[dict[tuple, list[dict[str, Any]]], dict[int, list[dict[str, Any]]]]:
    """Per (rank, loader, iterator, pid): the worker's samples in time order; per rank: its pass records."""
    workers: dict[tuple, list[dict[str, Any]]] = {}
    passes: dict[int, list[dict[str, Any]]] = {}
    for r, rec in record.ranks.items():
        for e in rec.memory:
            kind = e.get("kind")
            if kind == schema.K_WORKER_PASS:
                passes.setdefault(r, []).append(e)
            elif kind == schema.K_WORKER_MEM:
                for w in e.get("w") or ():
                    key = (r, e.get("loader", 0), e.get("it", 0), w.get("pid"))
                    workers.setdefault(key, []).append(dict(w, t=e.get("t", 0.0), k=e.get("k", 0)))
    for pts in workers.values():
        pts.sort(key=lambda w: w["t"])
    return workers, passes


def _judge(pts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One worker's growth: {"cause": "copy-on-read"|"allocations", from/to figures} or None."""
    if len(pts) < MIN_SAMPLES:
        return None
    field = "uss" if any(p.get("uss") for p in pts) else "pss"  # PSS where the platform gives no USS
    b = min(pts[:2], key=lambda p: p.get(field) or 0)
    lo = float(b.get(field) or 0)
    hi = median(float(p.get(field) or 0) for p in pts[-3:])
    rise = hi - lo
    if rise < MIN_RISE or rise < MIN_REL * lo:
        return None
    rss_lo = float(b.get("rss") or 0)
    rss_hi = median(float(p.get("rss") or 0) for p in pts[-3:])
    reach = next(p["t"] for p in pts if p["t"] >= b["t"] and float(p.get(field) or 0) >= lo + 0.9 * rise)
    out = {
        "field": field,
        "from": lo,
        "to": hi,
        "seconds": round(reach - b["t"], 1),
        "observed_s": round(pts[-1]["t"] - b["t"], 1),
        "rss_from": rss_lo,
        "rss_to": rss_hi,
        "pss_from": float(b.get("pss") or 0),
        "pss_to": median(float(p.get("pss") or 0) for p in pts[-3:]),
        "samples": len(pts),
        "pass": pts[0].get("k", 0),
    }
    if rss_hi - rss_lo < max(RSS_FLAT_BYTES, RSS_FLAT * rise):
        return dict(out, cause="copy-on-read")
    g = growth([(p["t"], float(p.get(field) or 0)) for p in pts])
    if (
        g is not None
        # the Theil-Sen slope over the later half, not its end points: batches in flight (shared memory, counted
        # in the worker's USS and RSS until the rank maps them) make a healthy worker's figures jump both ways
        and g["late_slope"] * (g["last_step"] - g["first_step"]) / 2 >= LATE_RISE
        and g["late_total"] >= LATE_RISE
        and g["up_fraction"] >= 0.5
        and g["above_prior"] >= LATE_RISE / 2  # new highs, as a leak makes them
    ):
        return dict(out, cause="allocations")
    return None  # RSS grew with it and then stopped: buffers the workers filled once


def _stores(passes: list[dict[str, Any]], loader: int) -> list[dict[str, Any]]:
    first = next((p for p in passes if p.get("loader") == loader and p.get("stores") is not None), None)
    return list(first.get("stores") or []) if first else []


def _who(ranks: list[int], all_ranks: list[int]) -> str:
    if len(ranks) == len(all_ranks):
        return "on every rank"
    return f"on rank(s) {rank_list(ranks)} of {len(all_ranks)}"


def _short(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def detect(record: RunRecord, cfg: Config) -> list[Finding]:
    """``memleak.dataloader-workers`` from the workers' USS/PSS/RSS samples (``worker_mem`` records)."""
    workers, passes = _series(record)
    if not workers:
        return []
    hits = []
    for (r, loader, it, pid), pts in workers.items():
        j = _judge(pts)
        if j is not None:
            hits.append(dict(j, rank=r, loader=loader, it=it, pid=pid, worker=pts[0].get("id", 0)))
    if not hits:
        return []
    copy = [h for h in hits if h["cause"] == "copy-on-read"]
    shown = copy or hits  # copy-on-read is the finding when there is any; the rest is the workers' own memory
    shown.sort(key=lambda h: (h["rank"], h["loader"], h["it"], h["worker"]))
    culprits = sorted({h["rank"] for h in shown})
    all_ranks = sorted(record.ranks)
    field = shown[0]["field"].upper()
    # one line per worker of each rank's first growing pass; later passes' new workers only copy again
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for h in shown:
        groups.setdefault((h["rank"], h["loader"], h["it"]), []).append(h)
    first: dict[int, list[dict[str, Any]]] = {}
    for (r, _l, _i), hs in sorted(groups.items()):
        first.setdefault(r, hs)
    listed = [h for r in culprits for h in first[r]]
    per = [
        f"rank {h['rank']} worker {h['worker']}: {field} {_mib(h['from'])} -> {_mib(h['to'])} in {h['seconds']:.1f} s"
        for h in listed[:SHOWN]
    ]
    more = f" and {len(listed) - SHOWN} more" if len(listed) > SHOWN else ""
    later = max(sum(1 for g in groups if g[0] == r) for r in culprits) - 1
    verb = "copied" if copy else "grew"
    again = (
        ""
        if not later
        else f"; the next pass's new workers {verb} again"
        if later == 1
        else f"; the new workers of {later} later passes {verb} again"
    )
    # what the workers hold at once: per rank, the pass whose copies add up to most (its workers live together)
    peak: dict[int, float] = {}
    for (r, _l, _i), hs in groups.items():
        peak[r] = max(peak.get(r, 0.0), sum(float(h["to"] - h["from"]) for h in hs))
    extra = sum(peak.values())
    n_at_once = sum(len(first[r]) for r in culprits)
    stores = {r: _stores(passes.get(r, []), next(h["loader"] for h in shown if h["rank"] == r)) for r in culprits}
    s0 = next((s[0] for s in stores.values() if s), None)
    locs = tuple(
        Location(r, s[0]["file"], int(s[0]["line"]), s[0].get("func", ""), "stores")
        for r, s in stores.items()
        if s and s[0].get("file") and s[0].get("line")
    )
    rss = [h["rss_to"] for h in shown]
    if copy:
        what = (
            f"`{s0['cls']}.{s0['attr']}` (a {s0['container']} of {s0['len']:,} `{s0['elem']}`, about {_mib(s0['bytes'])}"
            + (f", {_short(s0['file'])}:{s0['line']}" if s0.get("file") else "")
            + ")"
            if s0
            else "the Dataset's Python objects (no attribute holding a big list, dict or tuple was found)"
        )
        msg = (
            f"DataLoader workers copy the Dataset's Python objects on read {_who(culprits, all_ranks)}: each "
            f"worker's private memory ({field}) grows towards a copy of {what}: {'; '.join(per)}{more}{again}. Their RSS "
            f"stayed flat (at about {_mib(median(rss))}): the forked pages were already counted as shared, and "
            "reading a Python object writes its reference count, which copies its page into the worker "
            f"(pytorch/pytorch#13246). {n_at_once} worker(s) hold about {_mib(extra)} of copies at once"
        )
        hint = (
            (f"Keep `{s0['attr']}` " if s0 else "Keep the samples ")
            + "in numpy arrays or tensors rather than Python objects: e.g. one array per field or a "
            "structured array (`np.array(rows, dtype=[('id', 'i8'), ('x', 'f4')])`), strings as one numpy "
            "byte buffer with an offsets array, or each record pickled into one numpy `uint8` buffer with "
            "offsets (unpickled in `__getitem__`); or put them in shared memory (`tensor.share_memory_()`, "
            "`multiprocessing.shared_memory`). `persistent_workers=True` only saves copying again each epoch."
        )
    else:
        msg = (
            f"DataLoader worker processes' own memory grows {_who(culprits, all_ranks)}: {'; '.join(per)}{more}{again}; "
            f"their RSS grew with it (to about {_mib(median(rss))}): the workers allocate it themselves"
        )
        hint = (
            "Look at what the Dataset keeps inside each worker (a cache filled in `__getitem__` lives once per "
            "worker and keeps growing): bound it, or fill it once before the DataLoader starts its workers, in numpy "
            "arrays or tensors (a list of Python objects built before the fork is copied on read)."
        )
    evidence = {
        "cause": "copy-on-read" if copy else "allocations",
        "field": field.lower(),
        "workers": [
            {k: (int(v) if isinstance(v, float) and k.endswith(("from", "to")) else v) for k, v in h.items()}
            for h in shown
        ],
        "stores": {str(r): s for r, s in stores.items()},
        "extra_bytes": int(extra),
    }
    return [Finding(ID, "error", msg, hint, tuple(culprits), locs, evidence, culprits=tuple(culprits))]
