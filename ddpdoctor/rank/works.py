"""Issued vs completed: the Work of every asynchronous collective (``async_op=True``, ``isend``/``irecv``,
and on NCCL every collective, which returns before it completes) is kept until it completes.

The training thread only appends to a deque. The heartbeat thread asks each Work ``is_completed()`` (on
NCCL a query of a CUDA event, never a wait), drops the reference of each that completed at once, and
reports in the heartbeat the oldest collective still incomplete (the ledger stays the training thread's). A rank whose main thread stops
moving while that collective is incomplete is blocked at a sync point waiting for it (``Work.wait()``,
``loss.item()``, ``torch.cuda.synchronize()``): the analysis treats it as waiting in that collective.
"""

from __future__ import annotations

import collections
from typing import Any

LIMIT = 4096  # Works kept at most; beyond it new ones are not tracked (counted in "untracked")
SENDS = ("send", "isend")
RECVS = ("recv", "irecv")


class WorkTracker:
    """Outstanding Works of one rank. ``add`` runs on the training thread, ``poll`` on the heartbeat's."""

    def __init__(self) -> None:
        self.q: collections.deque[list[Any]] = collections.deque()
        self.untracked = 0
        self.completed = 0

    def add(
        self,
        work: Any,
        op: str,
        group: str,
        seq: int,
        shapes: list,
        dtypes: list,
        site: Any,
        t0: float,
        peer: int | None = None,
    ) -> None:
        """Keep the Work of a collective issued at sequence position ``seq`` (training thread; cheap)."""
        if len(self.q) >= LIMIT:
            self.untracked += 1
            return
        self.q.append([work, op, group, seq, shapes, dtypes, site, t0, peer])

    def poll(self) -> dict[str, Any] | None:
        """Drop every Work that completed; return the oldest incomplete collective with the count of
        incomplete ones and of incomplete sends (heartbeat thread)."""
        oldest: list[Any] | None = None
        pending = sends = 0
        for item in list(self.q):  # a C-level copy: safe while the training thread appends
            work = item[0]
            if work is None:
                continue
            try:
                done = bool(work.is_completed())
            except Exception:
                done = True  # a Work that failed or cannot say: the call's own error tells the rest
            if done:
                item[0] = None  # the user's tensors are not kept alive by us
                self.completed += 1
                continue
            pending += 1
            if item[1] in SENDS:
                sends += 1
            if oldest is None:
                oldest = item
        while self.q and self.q[0][0] is None:
            self.q.popleft()
        if oldest is None:
            return None
        _w, op, group, seq, shapes, dtypes, site, t0, peer = oldest
        out = {
            "op": op,
            "group": group,
            "seq": seq,
            "shapes": shapes,
            "dtypes": dtypes,
            "site": site,
            "since": t0,
            "n": pending,
            "sends": sends,
        }
        if peer is not None:
            out["peer"] = peer
        return out
