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
from typing import Any

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


def load_runs(run_dirs: list[str]) -> RunRecord:
    """Load the run directories of one job's nodes (each node's ddpdoctor keeps its own ranks) as one
    record: ranks are global, so they merge; the first directory's manifest speaks for the job."""
    share: dict[tuple, list[dict[str, Any]]] = {}
    records = [load_run(d, share) for d in run_dirs]
    if len(records) == 1:
        return with_mirrors(records[0], run_dirs)
    first = records[0]
    ranks: dict[int, RankRecord] = {}
    for rec in records:
        for r, rr in rec.ranks.items():
            if r in ranks:
                raise RunDirError(
                    f"rank {r} appears in {rec.run_dir} and in another run directory: "
                    "give each node's run directory of one job once"
                )
            ranks[r] = rr
    monitor = sorted((e for rec in records for e in rec.monitor), key=lambda e: e.get("t", 0.0))
    return with_mirrors(
        RunRecord(
            first.run_dir,
            first.manifest,
            dict(sorted(ranks.items())),
            monitor,
            [e for rec in records for e in rec.launcher],
            tuple(os.path.join(os.path.basename(rec.run_dir), c) for rec in records for c in rec.cut),
            attempt=first.attempt,
            records_dir=first.records_dir,
            attempts=_merged_attempts(records),
        ),
        run_dirs,
    )


def _merged_attempts(records: list[RunRecord]) -> tuple[RunRecord, ...]:
    """The earlier attempts of a job across nodes: each node's attempt i holds its own ranks of attempt i.
    Every node's agent restarts with the others (one rendezvous), so the nodes have as many attempts; where
    one has fewer (a node that joined later), the attempts all of them hold are merged."""
    n = min(len(r.attempts) for r in records)
    out = []
    for i in range(n):
        parts = [r.attempts[i] for r in records]
        ranks: dict[int, RankRecord] = {}
        for p in parts:
            for r, rr in p.ranks.items():
                ranks.setdefault(r, rr)
        out.append(replace(parts[0], ranks=dict(sorted(ranks.items()))))
    return tuple(out)
