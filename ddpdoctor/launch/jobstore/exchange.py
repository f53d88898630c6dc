"""What the nodes tell each other through the store: this node's summary, the others' (the judge reads
them), the lost nodes, the mirrors of their records, the notes."""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any, Callable

from ddpdoctor.analysis import live
from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import ranks_phrase
from ddpdoctor.launch.jobstore.transport import Transport
from ddpdoctor.record import nodeview, schema
from ddpdoctor.record.reader import RankRecord, RunRecord
from ddpdoctor.record.writer import JsonlWriter

PUBLISH_S = 1.0  # each node writes its summary about once a second
LOST_S = 10.0  # a node whose summary has not changed for this long while it had not finished is lost
REDRAW_S = 5.0  # the judge: while no rank anywhere waits, it looks at every rank this often (the live table)
K_JOB = "job"  # monitor.jsonl: the job store was reached (address, role, node)
K_NODE_LOST = "node_lost"  # monitor.jsonl: a node (host, ranks) stopped answering
K_JOB_NOTE = "job_note"  # monitor.jsonl: something the job store said that was ignored or failed


def node_of(record: RunRecord) -> tuple[int | None, str, list[int]]:
    """This node's rank (its ranks' GROUP_RANK), host and ranks, from the ranks' start events."""
    nodes = {e.get("node_rank") for rec in record.ranks.values() if (e := rec.event(schema.K_START))}
    hosts = {e.get("host") for rec in record.ranks.values() if (e := rec.event(schema.K_START))}
    node = next(iter(nodes)) if len(nodes) == 1 and isinstance(next(iter(nodes)), int) else None
    return node, str(next(iter(hosts), "") or socket.gethostname()), sorted(record.ranks)


# -- exchange -------------------------------------------------------------------------------------
class Exchange:
    """What the nodes tell each other through the store: this node's summary (published once a second),
    the others' (the judge reads them), the lost nodes, the mirrors of their records, the notes."""

    def __init__(self, tr: Transport, run_dir: str, cfg: Config, say: Callable[[str], None], log: JsonlWriter) -> None:
        self.tr, self.addr, self.run_dir, self.cfg, self.say, self.log = tr, tr.addr, run_dir, cfg, say, log
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.node: int | None = None
        self.host = socket.gethostname()
        self.own: dict[str, Any] | None = None  # the summary to publish next
        self.own_t = 0.0
        self.remote: dict[int, dict[str, Any]] = {}  # node -> its latest summary (judge)
        self.seen: dict[int, tuple[float, float]] = {}  # node -> (its summary's t, when we saw it change)
        self.notes: set[str] = set()
        self.lost: dict[int, dict[str, Any]] = {}
        self.dumped: str | None = None
        # the judge: the other nodes' values change about once a second, so their ranks are rebuilt, and
        # the job judged, once per new value (or second), not on every poll (a fifth of a second)
        self.gen = 0  # bumped when some node's value changed
        self.hot: set[int] = set()  # the nodes whose latest value says that some rank of theirs waits
        self.wanted: set[int] = set()  # the judge: the nodes that draw a live table
        self.redraw_s = REDRAW_S  # the monitor sets PUBLISH_S when a stop rule (--steps, --epochs) is on
        self.wants_table = False  # the monitor sets it on a node that draws the live table

    # -- what the roles read (under the exchange's lock; copies, never the fields themselves)
    def generation(self) -> int:
        """Bumped each time some node's value changed (the judge rebuilds the job's ranks once per change)."""
        with self.lock:
            return self.gen

    def any_hot(self) -> bool:
        """Some node's latest value says that a rank of its waits (or ended, or stalls)."""
        with self.lock:
            return bool(self.hot)

    def tables_wanted(self) -> bool:
        """Some other node draws a live table (the judge shares the job's)."""
        with self.lock:
            return bool(self.wanted)

    def node_directory(self, own: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
        """Every node the judge knows, as the job's value lists them: node -> host and ranks (``own``: this
        node's published summary)."""
        with self.lock:
            items = list(self.remote.items())
        nodes = {str(n): {"host": d.get("host"), "ranks": list(d.get("rids") or ())} for n, d in items}
        if own is not None:
            nodes[str(own["node"])] = {"host": own["host"], "ranks": [x.get("r") for x in own["ranks"]]}
        return nodes

    def undumped(self) -> list[int]:
        """The other nodes (not lost) whose latest value does not acknowledge this node's stack dump."""
        with self.lock:
            return [n for n, d in self.remote.items() if d.get("dumped") != self.dumped and n not in self.lost]

    def lost_nodes(self) -> dict[int, dict[str, Any]]:
        """The nodes named lost so far, and what is known of each."""
        with self.lock:
            return dict(self.lost)

    def identity(self) -> tuple[int | None, str, str]:
        """This node's rank in the job (None until its ranks said), host and run directory."""
        return self.node, self.host, self.run_dir

    def redraw_period(self) -> float:
        """How often the judge looks at every rank while none waits (the monitor may shorten it)."""
        return self.redraw_s

    def wake_now(self) -> None:
        """Have the link's thread publish now rather than at its next second."""
        self.wake.set()

    def record(self, kind: str, **fields: Any) -> None:
        """One line in this node's monitor.jsonl."""
        self.log.write(kind, None, **fields)

    # -- this node's summary
    def offer(self, record: RunRecord, now: float) -> None:
        """Hand the thread this node's latest summary (at most once per PUBLISH_S)."""
        if now - self.own_t < PUBLISH_S * 0.9 or not record.ranks:
            return
        node, host, ranks = node_of(record)
        if node is None:
            return
        self.node, self.host = node, host
        dl = [e for rec in record.ranks.values() for e in rec.events if e.get("kind") == schema.K_DATALOADER]
        summ = [nodeview.rank_summary(rec) for rec in record.ranks.values()]
        for s in summ:  # the --epochs stop rule counts DataLoader passes (bounded)
            s["ev"] += [e for e in dl if e.get("rank") == s["r"]][-200:]
        with self.lock:
            self.own = {
                "node": node,
                "host": host,
                "ranks": summ,
                "t": now,
                "dumped": self.dumped,
                "nranks": len(ranks),
                # some rank of this node waits (or ended, or stalls): the judge needs to look at the job now
                "hot": live.verdict_near(record, self.cfg, now),
                "wants_table": self.wants_table,  # this node draws a live table: the judge shares the job's
            }
            self.own_t = now
        self.wake.set()

    def due(self, now: float) -> bool:
        return now - self.own_t >= PUBLISH_S * 0.9

    def mark_dumped(self, vid: Any) -> None:
        """This node collected its stacks for verdict ``vid``: its next value says so."""
        self.dumped = str(vid) if vid else "1"
        with self.lock:
            if self.own is not None:
                self.own = dict(self.own, dumped=self.dumped)

    def publish_own(self) -> dict[str, Any] | None:
        with self.lock:
            own = self.own
        if own is not None:
            self.tr.set(f"node/{own['node']}", nodeview.node_value(self.addr.job, **own))
        return own

    # -- the others' values
    def read_nodes(self) -> None:
        keys = [self.tr.prefix + f"node/{n}" for n in range(self.addr.nnodes) if n != self.node]
        # one call while every node has published (a check per key would be nnodes round trips a second)
        present = keys if keys and self.tr.check_all(keys) else [k for k in keys if self.tr.check_all([k])]
        if not present:
            return
        values = self.tr.multi_get(present)
        now = time.time()
        for raw in values:
            doc, note = nodeview.parse(raw, nodeview.S_NODE, self.addr.job)
            if note:
                self.note(note)
            if doc is None or not isinstance(doc.get("node"), int):
                continue
            n = doc["node"]
            t = float(doc.get("t") or 0.0)
            with self.lock:
                prev = self.seen.get(n)
                if prev is None or prev[0] != t:
                    self.seen[n] = (t, now)
                    self.gen += 1
                self.remote[n] = doc
                if doc.get("wants_table"):
                    self.wanted.add(n)
                else:
                    self.wanted.discard(n)
                if doc.get("hot", True):  # a value that does not say: as if it waited
                    self.hot.add(n)
                else:
                    self.hot.discard(n)

    def remote_ranks(self, now: float | None = None, ledger: bool = True) -> dict[int, RankRecord]:
        """The other nodes' ranks as last read (the judge). With ``now``, each node's ranks have their
        times moved onto this clock as of when that node published them (:meth:`_shift`); ``ledger=False``
        leaves their ledgers out."""
        with self.lock:
            nodes = [(d, self.seen.get(n)) for n, d in self.remote.items()]
        out: dict[int, RankRecord] = {}
        for doc, seen in nodes:
            shift = self._shift(doc, seen, now) if now is not None else 0.0
            for d in nodeview.node_ranks(doc):
                rec = nodeview.rank_from_summary(d, shift, ledger) if isinstance(d, dict) else None
                if rec is not None:
                    out[rec.rank] = rec
        return out

    def _shift(self, doc: dict[str, Any], seen: tuple[float, float] | None, now: float) -> float:
        """How far to move a node's times so that its value reads as of now. A value is a snapshot that
        is up to a second or two old when judged (a second between publications, another between reads):
        measured to ``now``, a rank seen 20 ms into its loss all_reduce would look like it had waited for
        over a second, and two such snapshots of a healthy job at different steps would "prove" a deadlock.
        So a node's value counts as current while the node keeps publishing (``now - t``: its own clock's
        offset cancels too); once its value is ``stale`` s older than when this judge first saw it, its
        ranks age again, and go stale as ranks whose heartbeats stopped (a lost node is named at LOST_S)."""
        try:
            t = float(doc.get("t") or 0.0)
        except (TypeError, ValueError):
            return 0.0
        if not t:
            return 0.0
        seen_at = seen[1] if seen else now
        return min(now, seen_at + self.cfg.stale) - t

    def get_doc(self, key: str, kind: str) -> dict[str, Any] | None:
        if not self.tr.check(key):
            return None
        doc, note = nodeview.parse(self.tr.get(key), kind, self.addr.job)
        if note:
            self.note(note)
        return doc

    # -- lost nodes
    def lost_info(self, n: int, now: float) -> dict[str, Any]:
        d = self.remote.get(n) or {}
        seen = self.seen.get(n, (0.0, 0.0))[1]
        ranks = [int(r) for r in d.get("rids") or () if isinstance(r, int)]
        clock = time.strftime("%H:%M:%S", time.localtime(seen)) if seen else "?"
        why = (
            f"its ddpdoctor stopped writing to the job store at {clock} and had not come back {now - seen:.0f} s later"
            if d
            else "its ddpdoctor never reached the job store"
        )
        return {"host": d.get("host"), "ranks": ranks, "seen": seen or None, "last_t": d.get("t"), "why": why}

    def lost_now(self, now: float, final: bool = False) -> dict[int, dict[str, Any]]:
        """Nodes whose summary stopped changing LOST_S ago while some of their ranks had not finished."""
        out = {}
        with self.lock:
            items = list(self.remote.items())
        for n, d in items:
            seen = self.seen.get(n, (0.0, now))[1]
            if now - seen < LOST_S:
                continue
            running = d.get("running")  # the value's header: its ranks that had not finished
            if running or final:
                out[n] = self.lost_info(n, now)
        return out

    def mark_lost(self, n: int, info: dict[str, Any], last: dict[str, Any] | None = None) -> None:
        if n in self.lost and last is None:
            return
        last = last or self.remote.get(n)
        info = dict(info)
        self.lost[n] = info
        if last is not None:
            nodeview.write_live_mirror(self.mirror(n), last)
        self.log.write(
            K_NODE_LOST,
            None,
            node=n,
            host=info.get("host"),
            ranks=info.get("ranks") or [],
            seen=info.get("seen"),
            last_t=info.get("last_t"),
            why=info.get("why"),
        )
        self.say(
            f"node {n} ({info.get('host') or 'host unknown'}, "
            f"{ranks_phrase(info.get('ranks') or []) if info.get('ranks') else 'ranks unknown'}) lost: "
            f"{info.get('why')}"
        )

    def mirror(self, n: int) -> str:
        path = os.path.join(self.run_dir, nodeview.MIRRORS_DIR, str(n))
        os.makedirs(os.path.join(self.run_dir, nodeview.MIRRORS_DIR), mode=0o700, exist_ok=True)
        os.makedirs(path, mode=0o700, exist_ok=True)
        return path

    # -- after the run
    def send_final(self, record: RunRecord) -> None:
        """This node's records (bounded, compressed) for the other nodes."""
        node, _host, ranks = node_of(record)
        if node is None:
            node = self.node
        if node is not None:
            self.node = node
            bundle = nodeview.bundle_run(self.run_dir, ranks)
            self.tr.set(
                f"final/{node}",
                nodeview.envelope(nodeview.S_FINAL, self.addr.job, node=node, host=self.host, ranks=ranks, **bundle),
            )

    def note(self, text: str) -> None:
        if text in self.notes:
            return
        self.notes.add(text)
        self.log.write(K_JOB_NOTE, None, note=text)
        self.say(text)
