"""One job, one verdict across nodes: the nodes' monitors share their ranks through a c10d TCPStore.

Where the store is: a ``torch.distributed.TCPStore`` that the ddpdoctor on the rendezvous host serves beside
torchrun's own store, at the rendezvous port + 1 (``--rdzv-endpoint HOST:PORT``, or ``--master-addr`` /
``--master-port``; SLURM and PyTorchJob environments resolve to those, launch/launchers.py), or where
``DDPDOCTOR_JOB_STORE=HOST:PORT`` says. It listens on that host's address only (the socket is bound here and
handed to TCPStore), not on every interface. torchrun's own rendezvous store is not used: the agent that hosts
it closes it as soon as its exit barrier passes, before the other nodes could read the last records.

The ddpdoctor that can bind the address serves the store and judges (on the rendezvous host, which is node 0
for a static rendezvous); every other one connects as a client. Once a second each node writes one JSON value
of its ranks' summaries (record/nodeview.py); the judge reads the others' (``nnodes`` values a second), runs the
live detectors over every rank and writes the job's verdict (one value), which the others read: store traffic
is O(nodes) a second. The judge moves each node's times to when that node published (:meth:`JobLink._shift`:
a value a second old must not make a 20 ms wait look like a second), and rebuilds and judges the job's ranks
once per new value while some node says a verdict may be near (``hot``), else every ``REDRAW_S``
(benchmarks/multinode_scale.py, docs/benchmarks.md). Every store call runs on this module's thread with a
bounded timeout, so the monitor's poll loop never waits on the network. A node that cannot reach the store
keeps today's behaviour (its own ranks, ``multinode.partial-view`` naming the nodes it could not see).

After the run: each node writes its records (bounded, compressed), the judge gathers every node's (a node
whose values stopped for ``LOST_S`` while it had not finished is *lost*: its last summary is kept), writes
``done``, and each node copies the others' records into ``RUN_DIR/nodes/<n>/`` (record/mirror.py).
"""

from __future__ import annotations

import dataclasses
import errno
import gc
import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

from ddpdoctor.analysis import live
from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import ranks_phrase
from ddpdoctor.analysis.state import RankState, all_states
from ddpdoctor.launch.launchers import max_nodes
from ddpdoctor.record import nodeview, schema
from ddpdoctor.record.reader import RankRecord, RunRecord
from ddpdoctor.record.writer import JsonlWriter

PUBLISH_S = 1.0  # each node writes its summary about once a second
OP_TIMEOUT_S = 5.0  # every store call
CONNECT_S = 60.0  # a client waits this long for the judging node's store to appear
LOST_S = 10.0  # a node whose summary has not changed for this long while it had not finished is lost
FINAL_WAIT_S = 30.0  # after the run: how long the judge waits for a running node's records (beyond LOST_S)
DONE_WAIT_S = 45.0  # ... and a node for the judge's "done"
ACK_WAIT_S = 10.0  # the judge keeps the store up until every node has copied the records, at most this long
DUMP_ACK_S = 4.0  # after a verdict the judge waits this long for the other nodes' stack dumps before ending
REDRAW_S = 5.0  # the judge: while no rank anywhere waits, it looks at every rank this often (the live table)
# what a store call raises: torch's DistError family (RuntimeError), sockets, a value that does not decode,
# and no torch at all
STORE_ERRORS = (RuntimeError, OSError, ValueError, ImportError)
K_JOB = "job"  # monitor.jsonl: the job store was reached (address, role, node)
K_NODE_LOST = "node_lost"  # monitor.jsonl: a node (host, ranks) stopped answering
K_JOB_NOTE = "job_note"  # monitor.jsonl: something the job store said that was ignored or failed
OWNER_KEY = "ddpdoctor/owner"  # the store's first value, set by the node that serves it: the job it serves
S_OWNER = "ddpdoctor.owner"
OWNER_WAIT_S = 5.0  # a client waits this long for the owner value (the server sets it right after it starts)


class ForeignStore(RuntimeError):
    """The store at the job store's address serves another job (or is not a ddpdoctor job store at all)."""


def owner_value(job: str, host: str) -> bytes:
    """The value at :data:`OWNER_KEY`: which job the store serves, and where."""
    return nodeview.envelope(S_OWNER, job, host=host)


def owner_mismatch(raw: bytes | None, job: str) -> str | None:
    """Why a store whose owner value is ``raw`` is not this job's (None when it is): two jobs that happen to
    share a host:port (two SLURM jobs on one node, two torchruns given the same endpoint) are told apart."""
    if raw is None:
        return "it is not a ddpdoctor job store (no owner value)"
    doc, _note = nodeview.parse(raw, S_OWNER, job)
    if doc is not None:
        return None
    try:
        other = json.loads(raw)
        other_job = other.get("job") if isinstance(other, dict) else None
    except (ValueError, UnicodeDecodeError):
        other_job = None
    return f"it serves job {str(other_job)[:60]!r}" if other_job is not None else "its owner value does not decode"


@dataclass(frozen=True)
class StoreAddr:
    """Where the job store is and which job it serves."""

    host: str
    port: int
    job: str
    nnodes: int
    source: str  # how it was found: "rdzv-endpoint", "master-addr", "DDPDOCTOR_JOB_STORE", "--job-store"


def _opt(args: list[str] | tuple[str, ...], name: str) -> str | None:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def _hostport(text: str, default_port: int) -> tuple[str, int]:
    text = text.strip()
    if text.startswith("["):  # [v6]:port
        host, _, rest = text[1:].partition("]")
        return host, int(rest.lstrip(":") or default_port)
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        return text, default_port
    return host, int(port)


def store_address(text: str) -> tuple[str, int] | None:
    """``HOST:PORT`` (``[v6]:PORT``) as (host, port); None when it is not one."""
    host, port = _hostport(text, 0)
    return (host, port) if host and 0 < port < 65536 else None


def resolve(
    torchrun_args: list[str] | tuple[str, ...], env: dict[str, str] | Any, option: str | None = None
) -> StoreAddr | None:
    """The job store of a multi-node run (None for a single node, or when no rendezvous host is known):
    ``option`` (--job-store), else $DDPDOCTOR_JOB_STORE, else the rendezvous host at its port + 1."""
    nnodes = max_nodes(_opt(torchrun_args, "--nnodes"))
    if nnodes <= 1 or "--standalone" in torchrun_args:
        return None
    rdzv_id = _opt(torchrun_args, "--rdzv-id")
    given, named = (option, "--job-store") if option else (env.get("DDPDOCTOR_JOB_STORE"), "DDPDOCTOR_JOB_STORE")
    endpoint = _opt(torchrun_args, "--rdzv-endpoint")
    addr = _opt(torchrun_args, "--master-addr")
    if endpoint:
        host, port = _hostport(endpoint, 29400)
        source = "rdzv-endpoint"
    elif addr:
        host, port = addr, int(_opt(torchrun_args, "--master-port") or 29500)
        source = "master-addr"
    else:
        host, port, source = "", 0, ""
    job = rdzv_id if rdzv_id and rdzv_id != "none" else f"{host}:{port}"
    if given:
        hp = store_address(given)
        return StoreAddr(hp[0], hp[1], job, nnodes, named) if hp else None
    if not host:
        return None
    return StoreAddr(host, port + 1, job, nnodes, source)


def _listen(host: str, port: int) -> socket.socket | None:
    """A listening socket on ``host:port`` when ``host`` is one of this machine's addresses and the port is
    free: then this ddpdoctor serves the store. None otherwise (another host's address, or taken)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return None
    for family, stype, proto, _canon, sockaddr in infos:
        s = socket.socket(family, stype, proto)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(sockaddr)
            s.listen(512)
            s.set_inheritable(False)
            return s
        except OSError as e:
            s.close()
            if e.errno not in (errno.EADDRNOTAVAIL, errno.EADDRINUSE, errno.EAFNOSUPPORT):
                return None
    return None


def _import_dist() -> Any:
    """torch.distributed, with c10d's C++ log quiet: a client retrying its connection would print pages of
    traces on the user's terminal. The variable is only set for the import (c10 reads it once)."""
    old = os.environ.get("TORCH_CPP_LOG_LEVEL")
    os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"
    try:
        import torch.distributed as dist
    finally:
        if old is None:
            os.environ.pop("TORCH_CPP_LOG_LEVEL", None)
        else:
            os.environ["TORCH_CPP_LOG_LEVEL"] = old
    return dist


def node_of(record: RunRecord) -> tuple[int | None, str, list[int]]:
    """This node's rank (its ranks' GROUP_RANK), host and ranks, from the ranks' start events."""
    nodes = {e.get("node_rank") for rec in record.ranks.values() if (e := rec.event(schema.K_START))}
    hosts = {e.get("host") for rec in record.ranks.values() if (e := rec.event(schema.K_START))}
    node = next(iter(nodes)) if len(nodes) == 1 and isinstance(next(iter(nodes)), int) else None
    return node, str(next(iter(hosts), "") or socket.gethostname()), sorted(record.ranks)


class JobLink:
    """This node's link to the job store. The monitor calls :meth:`update` every poll, :meth:`view` for the
    record over every node's ranks, :meth:`verdict` and :meth:`finish`; the store calls run on a thread."""

    def __init__(self, addr: StoreAddr, run_dir: str, cfg: Config, say: Callable[[str], None]) -> None:
        self.addr, self.run_dir, self.cfg, self.say = addr, run_dir, cfg, say
        self.log = JsonlWriter(os.path.join(run_dir, schema.MONITOR))
        self.prefix = f"ddpdoctor/{addr.job}/"
        self.judge = False
        self.state = "connecting"  # connecting | linked | unreachable | foreign (another job's) | closed
        self.node: int | None = None
        self.host = socket.gethostname()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._store: Any = None
        self._server: Any = None
        self._sock: socket.socket | None = None
        self._own: dict[str, Any] | None = None  # the summary to publish next
        self._own_t = 0.0
        self._remote: dict[int, dict[str, Any]] = {}  # node -> its latest summary (judge)
        self._seen: dict[int, tuple[float, float]] = {}  # node -> (its summary's t, when we saw it change)
        self._job: dict[str, Any] | None = None  # the judge's job value (others)
        self._verdict: dict[str, Any] | None = None  # the judge's verdict to publish
        self._stopping: str | None = None  # the judge ended a healthy run (--steps): tell the others
        self._notes: set[str] = set()
        self._fetched = False  # every record of the job came from the judge (its report is the job's)
        self.lost: dict[int, dict[str, Any]] = {}
        self.dumped: str | None = None
        self._judge_gone: tuple[float, dict[str, Any]] | None = None
        # the judge: the other nodes' values change about once a second, so their ranks are rebuilt, and
        # the job judged, once per new value (or second), not on every poll (a fifth of a second)
        self._gen = 0  # bumped when some node's value changed
        # (gen, built at, ranks, with their ledgers)
        self._built: tuple[int, float, dict[int, RankRecord], bool] | None = None
        self._merged: tuple[tuple, RunRecord] | None = None  # (key, view) of the last poll
        self._states: tuple[RunRecord, float, dict[int, RankState]] | None = None  # (view, now, its states)
        self._remote_waiting = False  # some other node's rank waits (as of the last judgement)
        self._hot: set[int] = set()  # the nodes whose latest value says that some rank of theirs waits
        self.redraw_s = REDRAW_S  # the monitor sets PUBLISH_S when a stop rule (--steps, --epochs) is on
        self.wants_table = False  # the monitor sets it on a node that draws the live table
        self._wanted: set[int] = set()  # the judge: the nodes that draw a live table
        self._table: dict[str, Any] | None = None  # the judge: the job's table, shared in the job's value
        self._thread = threading.Thread(target=self._run, name="ddpdoctor-jobstore", daemon=True)
        self._thread.start()

    # -- the monitor's side (never blocks on the network) -------------------------------------
    def update(self, record: RunRecord, now: float) -> None:
        """Hand the thread this node's latest summary (at most once per PUBLISH_S)."""
        if now - self._own_t < PUBLISH_S * 0.9 or not record.ranks:
            return
        node, host, ranks = node_of(record)
        if node is None:
            return
        self.node, self.host = node, host
        dl = [e for rec in record.ranks.values() for e in rec.events if e.get("kind") == schema.K_DATALOADER]
        summ = [nodeview.rank_summary(rec) for rec in record.ranks.values()]
        for s in summ:  # the --epochs stop rule counts DataLoader passes (bounded)
            s["ev"] += [e for e in dl if e.get("rank") == s["r"]][-200:]
        with self._lock:
            self._own = {
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
            self._own_t = now
        self._wake.set()

    def due(self, now: float) -> bool:
        """Time to publish again: the monitor reads its ranks' ledgers first (the judge's proof needs them)."""
        return now - self._own_t >= PUBLISH_S * 0.9

    def remote_ranks(self, now: float | None = None, ledger: bool = True) -> dict[int, RankRecord]:
        """The other nodes' ranks as last read (the judge). With ``now``, each node's ranks have their
        times moved onto this clock as of when that node published them (:meth:`_shift`); ``ledger=False``
        leaves their ledgers out."""
        with self._lock:
            nodes = [(d, self._seen.get(n)) for n, d in self._remote.items()]
        out: dict[int, RankRecord] = {}
        for n, seen in nodes:
            shift = self._shift(n, seen, now) if now is not None else 0.0
            for d in nodeview.node_ranks(n):
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

    def view(self, record: RunRecord, now: float | None = None, full: bool = True) -> RunRecord:
        """The record over every node's ranks (the judge), else this node's own. The other nodes' ranks
        are rebuilt when a new value arrived or a second passed (see :meth:`fresh`), this node's every poll.
        ``full=False``: without the other nodes' ledgers, as the monitor's cheap poll reads its own ranks
        (the deadlock proof reads ledgers only when some rank waits: then the monitor asks again, in full)."""
        if not (self.judge and self.state == "linked"):
            return record
        now = time.time() if now is None else now
        with self._lock:
            gen = self._gen
        b = self._built
        # Rebuilt on a new value while a verdict may be near (a node says so, or this node's own ranks),
        # else every redraw_s (the live table, the stop rules): every path to a live verdict starts with a
        # rank that live.verdict_near sees on its own node (a wait, an end, a stall), so a job where no node
        # says so cannot give one, and a thousand ranks need not be rebuilt and judged every second. Also
        # after two seconds without a new value (the store stalls: the shift ages them), and in full.
        if (
            b is None
            or (full and not b[3])
            or now - b[1] >= self.redraw_s
            or ((b[0] != gen or now - b[1] >= 2 * PUBLISH_S) and self._job_hot(record, now))
        ):
            b = self._built = (gen, now, self.remote_ranks(now, full), full)
        gen, built_at, remote, with_ledgers = b
        key = (gen, built_at, with_ledgers, tuple(map(id, record.ranks.values())), len(record.monitor))
        if self._merged is not None and self._merged[0] == key:
            return dataclasses.replace(
                self._merged[1], manifest=record.manifest, monitor=record.monitor, launcher=record.launcher
            )
        extra = {r: rec for r, rec in remote.items() if r not in record.ranks}
        merged = dataclasses.replace(record, ranks=dict(sorted({**record.ranks, **extra}.items()))) if extra else record
        self._merged = (key, merged)
        return merged

    def table_wanted(self) -> bool:
        """The judge: some other node draws a live table, so the job's table is worth sharing."""
        with self._lock:
            return self.judge and self.linked() and bool(self._wanted)

    def share_table(self, table: dict[str, Any]) -> None:
        """The judge: the job's live table (render/live/rows.view_to_dict), published with the verdict."""
        with self._lock:
            self._table = table

    def job_table(self) -> tuple[dict[str, Any], Any] | None:
        """The other nodes: the job's live table as the judge last drew it, and the judge's node."""
        if self.judge or not self.linked():
            return None
        with self._lock:
            t = (self._job or {}).get("table")
        return (t, self._job_node()) if isinstance(t, dict) else None

    def _job_hot(self, record: RunRecord, now: float) -> bool:
        """Some node's latest value says that a verdict may be near (live.verdict_near), or this node's ranks do."""
        with self._lock:
            hot = bool(self._hot)
        return hot or live.verdict_near(record, self.cfg, now)

    def fresh(self, now: float) -> bool:
        """This poll's view holds the other nodes' ranks as rebuilt now: the judge judges (and redraws)
        the job on these polls only, about once a second, when the other nodes' values have changed;
        in between, nothing but this node's ranks could have moved. Always true on the other nodes."""
        if not (self.judge and self.state == "linked"):
            return True
        return self._built is not None and self._built[1] == now

    def states(self, merged: RunRecord, now: float) -> dict[int, RankState] | None:
        """The judge: every rank's state in this view at ``now`` when already computed this poll (the
        monitor's status line shares it), else None."""
        st = self._states
        return st[2] if st is not None and st[0] is merged and st[1] == now else None

    def _states_of(self, merged: RunRecord, now: float) -> dict[int, RankState]:
        """Every rank's state at ``now``, computed once per view (the waiting check and the verdict share it)."""
        if self._states is None or self._states[0] is not merged or self._states[1] != now:
            self._states = (merged, now, all_states(merged, now, self.cfg))  # holds merged: no id reuse
        return self._states[2]

    def anyone_waiting(self, record: RunRecord, merged: RunRecord, now: float) -> bool:
        """live.anyone_waiting over the job (the judge: over every rank when :meth:`fresh`, else over this
        node's ranks and what the last judgement saw of the others), so the ledgers are read when needed."""
        if not (self.judge and self.linked()):
            return live.anyone_waiting(merged, self.cfg, now)
        if self.fresh(now):
            self._remote_waiting = live.anyone_waiting(merged, self.cfg, now, self._states_of(merged, now))
            return self._remote_waiting
        return self._remote_waiting or live.anyone_waiting(record, self.cfg, now)

    def linked(self) -> bool:
        """The store answers: verdicts come from the judge."""
        return self.state == "linked"

    def verdict(self, merged: RunRecord, now: float) -> tuple[str, str] | None:
        """The judge: the live detectors over every rank, and lost nodes; the others: the judge's verdict.
        A node without the store: its own live verdict (today's behaviour)."""
        if not self.linked():
            return live.live_verdict(merged, self.cfg, now)
        if not self.judge:
            with self._lock:
                v = (self._job or {}).get("verdict")
            return (str(v.get("mode")), f"{v.get('reason')} (judged on node {self._job_node()})") if v else None
        # the job is judged on the views of every node's ranks rebuilt now (see view); lost nodes always
        fresh = self.fresh(now)
        lost = self._lost_now(now)
        got = None
        if fresh and not lost:
            states = self._states_of(merged, now)
            crash = live.crash_verdict(merged, states)
            # a crash anywhere ends the job at once, like a deadlock: its exception is known already
            got = ("crash", crash) if crash else live.live_verdict(merged, self.cfg, now, states)
        if lost:
            # a lost node is the cause: the ranks that wait for it are its victims, whatever they wait in
            n, info = next(iter(lost.items()))
            got = (
                "lost",
                (
                    f"node {n} ({info.get('host')}, {ranks_phrase(info.get('ranks') or [])}) stopped "
                    f"answering {now - info.get('seen', now):.0f} s ago: lost"
                ),
            )
        if got is not None:
            with self._lock:
                self._verdict = {"mode": got[0], "reason": got[1], "t": now, "id": f"{now:.3f}"}
            self._wake.set()
        return got

    def stop_rule(self) -> str | None:
        """A node that is not the judge: the judge ended the run on a stop rule (--steps, --epochs)."""
        if self.judge or not self.linked():
            return None
        with self._lock:
            s = (self._job or {}).get("stop")
        return str(s) if s else None

    def stopping(self, reason: str) -> None:
        """The judge: this healthy run ends on a stop rule; the others end too."""
        if self.judge:
            with self._lock:
                self._stopping = reason
            self._wake.set()
            self._sync_publish()

    def after_dumps(self, verdict_id_wait: bool = True) -> None:
        """After this node collected its stacks for a verdict: tell the judge (others), or wait a bounded
        time for the others' dumps before ending this node's ranks (the judge), so no node's ranks are torn
        down by the transport before they wrote where they were."""
        with self._lock:
            vid = (
                ((self._job or {}).get("verdict") or {}).get("id")
                if not self.judge
                else (self._verdict or {}).get("id")
            )
        self.dumped = str(vid) if vid else "1"
        with self._lock:
            if self._own is not None:
                self._own = dict(self._own, dumped=self.dumped)
        if not self.judge:
            self._sync_publish()
            return
        self._sync_publish()
        if not verdict_id_wait:
            return
        deadline = time.time() + DUMP_ACK_S
        while time.time() < deadline and self.linked():
            with self._lock:
                pending = [n for n, d in self._remote.items() if d.get("dumped") != self.dumped and n not in self.lost]
            if not pending:
                return
            self._wake.set()
            time.sleep(0.1)

    # -- after the run ------------------------------------------------------------------------
    def finish(self, record: RunRecord) -> None:
        """Exchange every node's records after the run (bounded); the others' go into RUN_DIR/nodes/."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=OP_TIMEOUT_S * 2 + 1)
        if self.state != "linked" or self._store is None:
            self.state = "foreign" if self.state == "foreign" else "unreachable"
            if self._judge_gone is not None:
                t, job = self._judge_gone
                n = job.get("node")
                info = (job.get("nodes") or {}).get(str(n)) or {}
                if isinstance(n, int):
                    self._mark_lost(
                        n,
                        {
                            "host": info.get("host"),
                            "ranks": info.get("ranks") or [],
                            "seen": t,
                            "last_t": t,
                            "why": "the job store its ddpdoctor served stopped answering",
                        },
                    )
            self._note_partial()
            self._close()
            return
        node, _host, ranks = node_of(record)
        if node is None:
            node = self.node
        try:
            if node is not None:
                self.node = node
                bundle = nodeview.bundle_run(self.run_dir, ranks)
                self._set(
                    f"final/{node}",
                    nodeview.envelope(
                        nodeview.S_FINAL, self.addr.job, node=node, host=self.host, ranks=ranks, **bundle
                    ),
                )
            if self.judge:
                self._gather()
            else:
                self._fetch()
        except STORE_ERRORS as e:  # a store that went away mid-exchange: what we have is kept
            self._note(f"the job store failed after the run ({type(e).__name__}: {str(e)[:120]})")
            self._note_partial()
        finally:
            self._close()

    def _gather(self) -> None:
        others = [n for n in range(self.addr.nnodes) if n != self.node]
        finals: dict[int, dict[str, Any]] = {}
        deadline = time.time() + FINAL_WAIT_S
        while others and time.time() < deadline:
            self._read_nodes()
            for n in list(others):
                got = self._get_doc(f"final/{n}", nodeview.S_FINAL)
                if got is not None:
                    finals[n] = got
                    others.remove(n)
            lost = self._lost_now(time.time(), final=True)
            for n in [n for n in others if n in lost]:
                self._mark_lost(n, lost[n])
                others.remove(n)
            if others:
                time.sleep(0.2)
        for n in others:  # never heard of, or still running when the wait ended
            self._mark_lost(n, self._lost_info(n, time.time()))
        for n, doc in finals.items():
            nodeview.write_mirror(self._mirror(n), doc)
        mine = {self.node} if self.node is not None else set()
        self._set(
            "done",
            nodeview.envelope(
                nodeview.S_DONE,
                self.addr.job,
                final=sorted(set(finals) | mine),
                lost={str(n): v for n, v in self.lost.items()},
            ),
        )
        waiting = [n for n in finals]
        deadline = time.time() + ACK_WAIT_S
        while waiting and time.time() < deadline:
            waiting = [n for n in waiting if not self._check(f"got/{n}")]
            if waiting:
                time.sleep(0.1)

    def _fetch(self) -> None:
        deadline = time.time() + DONE_WAIT_S + FINAL_WAIT_S
        done = None
        while time.time() < deadline:
            done = self._get_doc("done", nodeview.S_DONE)
            if done is not None:
                break
            time.sleep(0.2)
        if done is None:
            self._note("the judging node did not finish the exchange of records in time")
            self._note_partial()
            return
        for n in done.get("final") or ():
            if n == self.node:
                continue
            doc = self._get_doc(f"final/{n}", nodeview.S_FINAL)
            if doc is not None:
                nodeview.write_mirror(self._mirror(int(n)), doc)
        for n, info in (done.get("lost") or {}).items():
            if not (isinstance(info, dict) and n.isdigit()):
                continue
            last = self._get_doc(f"node/{n}", nodeview.S_NODE)
            self._mark_lost(int(n), info, last)
        self._set(f"got/{self.node}", nodeview.envelope("ddpdoctor.ack", self.addr.job, node=self.node))
        self._fetched = True

    def _mark_lost(self, n: int, info: dict[str, Any], last: dict[str, Any] | None = None) -> None:
        if n in self.lost and last is None:
            return
        last = last or self._remote.get(n)
        info = dict(info)
        self.lost[n] = info
        if last is not None:
            nodeview.write_live_mirror(self._mirror(n), last)
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

    def _mirror(self, n: int) -> str:
        path = os.path.join(self.run_dir, nodeview.MIRRORS_DIR, str(n))
        os.makedirs(os.path.join(self.run_dir, nodeview.MIRRORS_DIR), mode=0o700, exist_ok=True)
        os.makedirs(path, mode=0o700, exist_ok=True)
        return path

    def _note_partial(self) -> None:
        """No store: say which nodes this node could not see (multinode.partial-view reads it)."""
        self.log.write(
            K_JOB_NOTE,
            None,
            note=f"job store {self.addr.host}:{self.addr.port} {self.state}",
            unreachable=True,
            foreign=self.state == "foreign",
            store=f"{self.addr.host}:{self.addr.port}",
            judge=self._job_node() if self._job else None,
        )

    # -- lost nodes -----------------------------------------------------------------------------
    def _lost_info(self, n: int, now: float) -> dict[str, Any]:
        d = self._remote.get(n) or {}
        seen = self._seen.get(n, (0.0, 0.0))[1]
        ranks = [int(r) for r in d.get("rids") or () if isinstance(r, int)]
        clock = time.strftime("%H:%M:%S", time.localtime(seen)) if seen else "?"
        why = (
            f"its ddpdoctor stopped writing to the job store at {clock} and had not come back {now - seen:.0f} s later"
            if d
            else "its ddpdoctor never reached the job store"
        )
        return {"host": d.get("host"), "ranks": ranks, "seen": seen or None, "last_t": d.get("t"), "why": why}

    def _lost_now(self, now: float, final: bool = False) -> dict[int, dict[str, Any]]:
        """Nodes whose summary stopped changing LOST_S ago while some of their ranks had not finished."""
        out = {}
        with self._lock:
            items = list(self._remote.items())
        for n, d in items:
            seen = self._seen.get(n, (0.0, now))[1]
            if now - seen < LOST_S:
                continue
            running = d.get("running")  # the value's header: its ranks that had not finished
            if running or final:
                out[n] = self._lost_info(n, now)
        return out

    def judged_by(self) -> str | None:
        """After :meth:`finish`: the node that judged the job and wrote its report, when it is another node
        and this one got every record from it ("node 0 (n0), its records in DIR"); else None."""
        if self.judge or not self._fetched or not self._job:
            return None
        job = self._job
        where = f", its records in {job['run_dir']}" if isinstance(job.get("run_dir"), str) else ""
        return f"node {job.get('node', '?')} ({job.get('host') or 'host unknown'}){where}"

    def _job_node(self) -> Any:
        return (self._job or {}).get("node", "?")

    # -- the thread -------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._connect()
        except ForeignStore as e:
            # never join another job's store: its verdicts and its records are not this job's
            self.state = "foreign"
            self._store = None
            self._note(
                f"job store {self.addr.host}:{self.addr.port} is not this job's ({e}; this job is "
                f"{self.addr.job!r}): not joined; this node judges its own ranks only"
            )
            return
        except STORE_ERRORS as e:
            self.state = "unreachable"
            self._note(
                f"job store {self.addr.host}:{self.addr.port} unreachable ({type(e).__name__}: "
                f"{str(e).splitlines()[0][:120] if str(e) else ''}); this node judges its own ranks only"
            )
            return
        while not self._stop.is_set():
            self._wake.wait(PUBLISH_S)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self._publish()
                if self.judge:
                    self._read_nodes()
                else:
                    self._read_job()
            except STORE_ERRORS as e:
                if self._stop.is_set():
                    break
                with self._lock:
                    job = self._job
                if job is not None and not self.judge:  # the node that served the store went away
                    self._judge_gone = (time.time(), job)
                self.state = "unreachable"
                self._note(
                    f"the job store {self.addr.host}:{self.addr.port} stopped answering "
                    f"({type(e).__name__}); this node judges its own ranks only"
                )
                return

    def _connect(self) -> None:
        dist = _import_dist()
        self._sock = _listen(self.addr.host, self.addr.port)
        timeout = timedelta(seconds=OP_TIMEOUT_S)
        if self._sock is not None:
            fd = self._sock.detach()  # TCPStore owns the listening socket from here on (and closes it)
            self._sock = None
            self._server = dist.TCPStore(
                self.addr.host,
                self.addr.port,
                is_master=True,
                wait_for_workers=False,
                timeout=timeout,
                master_listen_fd=fd,
            )
            self.judge = True
            # the judge decodes a thousand ranks' values a second: each collection of the oldest generation
            # would walk every object torch's import made (a few hundred thousand) for nothing (they live
            # as long as this process). Freeze them out of the collector's walks (the monitor's process is
            # ddpdoctor's own: no user code runs in it)
            gc.freeze()
        deadline = time.time() + CONNECT_S
        while True:
            try:
                self._store = dist.TCPStore(
                    self.addr.host,
                    self.addr.port,
                    is_master=False,
                    timeout=timedelta(seconds=min(10.0, max(1.0, deadline - time.time()))),
                )
                break
            except Exception:
                if time.time() >= deadline or self._stop.is_set():
                    raise
                time.sleep(0.5)
        self._store.set_timeout(timeout)
        if self.judge:
            self._store.set(OWNER_KEY, owner_value(self.addr.job, self.host))
        else:
            self._check_owner()
        self.state = "linked"
        self.log.write(
            K_JOB,
            None,
            store=f"{self.addr.host}:{self.addr.port}",
            role="judge" if self.judge else "node",
            job=self.addr.job,
            source=self.addr.source,
            nnodes=self.addr.nnodes,
        )
        if self.judge:
            self.say(
                f"job store: serving {self.addr.host}:{self.addr.port} for job {self.addr.job!r}; this node "
                f"judges the job's {self.addr.nnodes} nodes"
            )
        else:
            self.say(f"job store: connected to {self.addr.host}:{self.addr.port} (job {self.addr.job!r})")

    def _check_owner(self) -> None:
        """A client: the store must name this job (:func:`owner_mismatch`), else :class:`ForeignStore`."""
        deadline = time.time() + OWNER_WAIT_S
        while not self._store.check([OWNER_KEY]):
            if time.time() >= deadline or self._stop.is_set():
                raise ForeignStore(owner_mismatch(None, self.addr.job) or "")
            time.sleep(0.1)
        why = owner_mismatch(bytes(self._store.get(OWNER_KEY)), self.addr.job)
        if why:
            raise ForeignStore(why)

    def _sync_publish(self) -> None:
        """Publish now from the caller's thread (a verdict's dump acknowledgement cannot wait a second)."""
        if self.linked():
            try:
                self._publish()
            except STORE_ERRORS as e:  # the thread's next call notices and says so
                self.log.write(K_JOB_NOTE, None, note=f"publish failed ({type(e).__name__})")

    def _publish(self) -> None:
        with self._lock:
            own, verdict, stop = self._own, self._verdict, self._stopping
        if own is not None:
            self._set(f"node/{own['node']}", nodeview.node_value(self.addr.job, **own))
        if self.judge:
            nodes = {
                str(n): {"host": d.get("host"), "ranks": list(d.get("rids") or ())} for n, d in self._remote.items()
            }
            if own is not None:
                nodes[str(own["node"])] = {"host": own["host"], "ranks": [x.get("r") for x in own["ranks"]]}
            self._set(
                "job",
                nodeview.envelope(
                    nodeview.S_VERDICT,
                    self.addr.job,
                    node=self.node,
                    host=self.host,
                    run_dir=self.run_dir,
                    verdict=verdict,
                    stop=stop,
                    nodes=nodes,
                    table=self._table if self._wanted else None,
                    t=time.time(),
                ),
            )

    def _read_nodes(self) -> None:
        keys = [self.prefix + f"node/{n}" for n in range(self.addr.nnodes) if n != self.node]
        # one call while every node has published (a check per key would be nnodes round trips a second)
        present = keys if keys and self._store.check(keys) else [k for k in keys if self._store.check([k])]
        if not present:
            return
        values = self._store.multi_get(present)
        now = time.time()
        for raw in values:
            doc, note = nodeview.parse(bytes(raw), nodeview.S_NODE, self.addr.job)
            if note:
                self._note(note)
            if doc is None or not isinstance(doc.get("node"), int):
                continue
            n = doc["node"]
            t = float(doc.get("t") or 0.0)
            with self._lock:
                prev = self._seen.get(n)
                if prev is None or prev[0] != t:
                    self._seen[n] = (t, now)
                    self._gen += 1
                self._remote[n] = doc
                if doc.get("wants_table"):
                    self._wanted.add(n)
                else:
                    self._wanted.discard(n)
                if doc.get("hot", True):  # a value that does not say: as if it waited
                    self._hot.add(n)
                else:
                    self._hot.discard(n)

    def _read_job(self) -> None:
        # once the job's value exists it is never deleted: one get a second, not a check and a get (the
        # judge's store serves every node)
        if self._job is not None:
            doc, note = nodeview.parse(bytes(self._store.get(self.prefix + "job")), nodeview.S_VERDICT, self.addr.job)
            if note:
                self._note(note)
        else:
            doc = self._get_doc("job", nodeview.S_VERDICT)
        if doc is not None:
            with self._lock:
                first = self._job is None
                self._job = doc
            if first:
                self.log.write(K_JOB, None, judge=doc.get("node"), judge_host=doc.get("host"))

    def _set(self, key: str, value: bytes) -> None:
        self._store.set(self.prefix + key, value)

    def _check(self, key: str) -> bool:
        return bool(self._store.check([self.prefix + key]))

    def _get_doc(self, key: str, kind: str) -> dict[str, Any] | None:
        if not self._check(key):
            return None
        doc, note = nodeview.parse(bytes(self._store.get(self.prefix + key)), kind, self.addr.job)
        if note:
            self._note(note)
        return doc

    def _note(self, text: str) -> None:
        if text in self._notes:
            return
        self._notes.add(text)
        self.log.write(K_JOB_NOTE, None, note=text)
        self.say(text)

    def _close(self) -> None:
        self.state = "closed" if self.state == "linked" else self.state
        self._store = None
        self._server = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def link(
    torchrun_args: tuple[str, ...] | list[str],
    run_dir: str,
    cfg: Config,
    say: Callable[[str], None],
    option: str | None = None,
) -> JobLink | None:
    """The job store link of a multi-node run (None on one node): started now, on its own thread.
    ``option``: --job-store HOST:PORT, which wins over $DDPDOCTOR_JOB_STORE."""
    addr = resolve(torchrun_args, os.environ, option)
    return JobLink(addr, run_dir, cfg, say) if addr is not None else None
