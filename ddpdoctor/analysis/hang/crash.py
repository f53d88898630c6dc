"""A rank that raised: the exception, the user's line that raised it first, and its victims. Pure.

Following torch elastic, the earliest real failure is the root cause; ranks that then failed with a
transport error (gloo's "Connection closed by peer") or were ended are its victims.
"""

from __future__ import annotations

import re

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, Location, ranks_phrase
from ddpdoctor.analysis.ids import CRASH_EXCEPTION
from ddpdoctor.analysis.state import is_transport_error, loc, user_frame_in
from ddpdoctor.record.reader import RunRecord

_WORKER_HEAD = re.compile(r"Caught (\w+) in DataLoader worker process (\d+)")


def detect(record: RunRecord, cfg: Config) -> list[Finding]:
    """Findings for ranks that raised or died of a signal: the exception, its rank and the user's line."""
    roots = [
        (float(rec.error.get("t") or 0.0), r, rec.error)
        for r, rec in record.ranks.items()
        if rec.error and not is_transport_error(rec.error)
    ]
    if not roots:
        return []
    # order by when the rank finished (error.json has no clock of its own): the finish event's time
    ordered = []
    for _t, r, err in roots:
        fin = record.ranks[r].event("finish")
        ordered.append((float(fin["t"]) if fin else float("inf"), r, err))
    ordered.sort()
    _t, rank, err = ordered[0]
    msg = str(err.get("message", ""))
    etype = err.get("type", "Exception")
    where = loc(rank, err.get("user_frame"), "raised")
    worker = _WORKER_HEAD.search(msg)
    evidence: dict = {"type": etype, "message": msg[:2000], "frames": err.get("frames", [])[-12:]}
    if worker:
        # the exception happened in a DataLoader worker: its own traceback is inside the message
        f = user_frame_in(msg.split("Original Traceback", 1)[-1], record)
        if f:
            where = Location(rank, f[0], f[1], f[2], "raised in DataLoader worker")
        etype = worker.group(1)
        first = msg.strip().splitlines()[-1] if msg.strip() else etype
        evidence["dataloader_worker"] = int(worker.group(2))
        headline = f"rank {rank}: {first} (in DataLoader worker {worker.group(2)})"
    else:
        first = msg.strip().splitlines()[0] if msg.strip() else ""
        headline = f"rank {rank} raised {etype}: {first[:200]}"
    locs = [where] if where else []
    victims = []
    for r, rec in record.ranks.items():
        if r == rank or any(r == o[1] for o in ordered[:1]):
            continue
        hb = rec.last_hb or {}
        site = (hb.get("pending") or {}).get("site") or hb.get("where")
        if rec.error and is_transport_error(rec.error):
            site = rec.error.get("user_frame") or site
        v = loc(r, site, "victim")
        fin = rec.event("finish")
        finished_ok = fin is not None and not fin.get("exception") and fin.get("code") in (0, None)
        if v and not finished_ok and not (rec.error and not is_transport_error(rec.error)):
            victims.append(r)
            locs.append(v)
    others = [o[1] for o in ordered[1:]]
    if victims:
        headline += f"; {ranks_phrase(victims)} {'was' if len(victims) == 1 else 'were'} waiting on it"
    if others:
        headline += f"; {ranks_phrase(others)} raised too, later"
    hint = (
        "Fix the exception on the rank that raised first; the other ranks' errors ('Connection closed by "
        "peer', timeouts) are consequences."
    )
    if worker:
        hint = "The exception was raised in a DataLoader worker (Dataset.__getitem__ or collate_fn): " + hint
    return [
        Finding(
            CRASH_EXCEPTION,
            "error",
            headline,
            hint,
            tuple(sorted(record.ranks)),
            tuple(locs),
            evidence,
            culprits=(rank,),
        )
    ]
