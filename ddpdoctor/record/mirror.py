"""The other nodes' records that a node's ddpdoctor took from the job store (``RUN_DIR/nodes/<n>/``), read
with the node's own. Stdlib only.

A mirror is a run directory of its own (the other node's manifest, monitor log and the tails of its rank
files), or, for a node that was lost before it could send them, its last live summary (``live.json``). A rank
that a given run directory holds itself is never replaced by a mirror's copy: ``ddpdoctor analyze DIR1 DIR2``
reads each node's own files, and a node's directory alone still covers the whole job.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

from . import nodeview
from .reader import RankRecord, RunDirError, RunRecord, load_run


def mirror_dirs(run_dir: str) -> list[str]:
    """The mirrors in ``run_dir/nodes/``, in node order."""
    base = os.path.join(run_dir, nodeview.MIRRORS_DIR)
    try:
        names = sorted((n for n in os.listdir(base) if n.isdigit()), key=int)
    except OSError:
        return []
    return [os.path.join(base, n) for n in names]


def _live_ranks(path: str) -> dict[int, RankRecord]:
    try:
        with open(os.path.join(path, nodeview.LIVE_ONLY), encoding="utf-8") as f:
            node = json.load(f)
    except (OSError, ValueError):
        return {}
    out = {}
    for d in (node.get("ranks") or []) if isinstance(node, dict) else []:
        rec = nodeview.rank_from_summary(d) if isinstance(d, dict) else None
        if rec is not None:
            out[rec.rank] = rec
    return out


def with_mirrors(record: RunRecord, run_dirs: list[str]) -> RunRecord:
    """``record`` with the ranks of every mirror under ``run_dirs`` that it does not hold itself, and the
    mirrors' monitor records (time-ordered, so every node reads the same job)."""
    ranks = dict(record.ranks)
    monitor = list(record.monitor)
    added = False
    for d in run_dirs:
        for m in mirror_dirs(d):
            if os.path.exists(os.path.join(m, "manifest.json")):
                try:
                    sub = load_run(m)
                except RunDirError:
                    continue
                got, mon = sub.ranks, sub.monitor
            else:
                got, mon = _live_ranks(m), []
            new = {r: rr for r, rr in got.items() if r not in ranks}
            if new or mon:
                added = True
            ranks.update(new)
            if new:
                monitor += mon
    if not added:
        return record
    monitor.sort(key=lambda e: e.get("t", 0.0))
    return replace(record, ranks=dict(sorted(ranks.items())), monitor=monitor)
