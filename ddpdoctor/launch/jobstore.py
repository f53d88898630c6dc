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
is O(nodes) a second. The judge moves each node's times to when that node published (:meth:`Exchange._shift`:
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
from enum import Enum
from typing import Any, Callable, Protocol

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


# -- the link's states ------------------------------------------------------------------------------
class LinkState(str, Enum):
    """Where this node's link to the job store stands (a ``str``: monitor.jsonl and the tests read the word)."""

    CONNECTING = "connecting"
    LINKED = "linked"
    UNREACHABLE = "unreachable"
    FOREIGN = "foreign"  # the store at the address serves another job: never joined
    CLOSED = "closed"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def may_become(self, other: LinkState) -> bool:
        """A move the link may make: staying put always; out of CONNECTING once (linked, or why not);
        out of LINKED only on a failure or the close after the run. The other states are final: a
        connection that comes in after the monitor gave up (finish) does not relink the node."""
        return other is self or other in _NEXT_STATES[self]


_NEXT_STATES: dict[LinkState, frozenset[LinkState]] = {
    LinkState.CONNECTING: frozenset({LinkState.LINKED, LinkState.UNREACHABLE, LinkState.FOREIGN}),
    LinkState.LINKED: frozenset({LinkState.UNREACHABLE, LinkState.CLOSED}),
    LinkState.UNREACHABLE: frozenset(),
    LinkState.FOREIGN: frozenset(),
    LinkState.CLOSED: frozenset(),
}


# -- what the monitor calls -------------------------------------------------------------------------
class JobRole(Protocol):
    """What the monitor calls on this node's part in the job, every poll and after the run: a one-node
    run's :class:`SoloRole` (the null object: this node's ranks are the job) or a multi-node run's
    :class:`JobLink` (which judges, or reads the judge's verdict, once the store answers). The monitor
    never asks which it holds."""

    redraw_s: float  # the judge: how often it looks at every rank while none waits
    wants_table: bool  # this node draws a live table (the judge shares the job's)

    def update(self, record: RunRecord, now: float) -> None: ...
    def due(self, now: float) -> bool: ...
    def view(self, record: RunRecord, now: float | None = None, full: bool = True) -> RunRecord: ...
    def fresh(self, now: float) -> bool: ...
    def states(self, merged: RunRecord, now: float) -> dict[int, RankState] | None: ...
    def anyone_waiting(self, record: RunRecord, merged: RunRecord, now: float) -> bool: ...
    def verdict(self, merged: RunRecord, now: float) -> tuple[str, str] | None: ...
    def stop_rule(self) -> str | None: ...
    def stopping(self, reason: str) -> None: ...
    def after_dumps(self, verdict_id_wait: bool = True) -> None: ...
    def table_wanted(self) -> bool: ...
    def share_table(self, table: dict[str, Any]) -> None: ...
    def job_table(self) -> tuple[dict[str, Any], Any] | None: ...
    def linked(self) -> bool: ...
    def finish(self, record: RunRecord) -> None: ...
    def judged_by(self) -> str | None: ...


class _OwnRanks:
    """The verdict side of a node that judges its own ranks only: the view is its record, the live
    detectors judge it, nothing is shared. :class:`SoloRole` is this; :class:`JudgeRole` and
    :class:`MemberRole` override what their part in the job changes."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg

    def view(self, record: RunRecord, now: float | None = None, full: bool = True) -> RunRecord:
        return record

    def fresh(self, now: float) -> bool:
        return True

    def states(self, merged: RunRecord, now: float) -> dict[int, RankState] | None:
        return None

    def anyone_waiting(self, record: RunRecord, merged: RunRecord, now: float) -> bool:
        return live.anyone_waiting(merged, self.cfg, now)

    def verdict(self, merged: RunRecord, now: float) -> tuple[str, str] | None:
        return live.live_verdict(merged, self.cfg, now)

    def stop_rule(self) -> str | None:
        return None

    def stopping(self, reason: str) -> None:
        pass

    def after_dumps(self, verdict_id_wait: bool = True) -> None:
        pass

    def table_wanted(self) -> bool:
        return False

    def share_table(self, table: dict[str, Any]) -> None:
        pass

    def job_table(self) -> tuple[dict[str, Any], Any] | None:
        return None

    def judged_by(self) -> str | None:
        return None


class SoloRole(_OwnRanks):
    """A one-node run: its ranks are the job. Every call is the identity or does nothing, so the monitor
    drives a one-node run and a node of a job the same way (and a node whose store does not answer
    falls back to this)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg)
        self.redraw_s = REDRAW_S
        self.wants_table = False

    def update(self, record: RunRecord, now: float) -> None:
        pass

    def due(self, now: float) -> bool:
        return False  # nothing to publish: the monitor reads the ledgers only when some rank waits

    def linked(self) -> bool:
        return False

    def finish(self, record: RunRecord) -> None:
        pass


# -- transport ------------------------------------------------------------------------------------
class Transport:
    """The job's c10d TCPStore: served here when this host can bind its address, else joined as a client;
    every call bounded by OP_TIMEOUT_S, every key under the job's prefix. Holds the link's state."""

    def __init__(self, addr: StoreAddr, stop: threading.Event) -> None:
        self.addr, self._stop = addr, stop
        self.prefix = f"ddpdoctor/{addr.job}/"
        self.state = LinkState.CONNECTING
        self._store: Any = None
        self._server: Any = None
        self._sock: socket.socket | None = None

    def become(self, state: LinkState) -> bool:
        """Move to ``state`` when :meth:`LinkState.may_become` allows it (else stay)."""
        if not self.state.may_become(state):
            return False
        self.state = state
        return True

    def linked(self) -> bool:
        return self.state is LinkState.LINKED

    @property
    def where(self) -> str:
        return f"{self.addr.host}:{self.addr.port}"

    def connect(self, host: str) -> bool:
        """Serve the store (True: this node judges) or join it; the store must be this job's
        (:class:`ForeignStore`). ``host``: this node's, in the owner value. Does not change the state: the
        link does, once its role is set."""
        dist = _import_dist()
        self._sock = _listen(self.addr.host, self.addr.port)
        timeout = timedelta(seconds=OP_TIMEOUT_S)
        serving = self._sock is not None
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
        if serving:
            self._store.set(OWNER_KEY, owner_value(self.addr.job, host))
        else:
            self._check_owner()
        return serving

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

    def open(self) -> bool:
        return self._store is not None

    def set(self, key: str, value: bytes) -> None:
        self._store.set(self.prefix + key, value)

    def check(self, key: str) -> bool:
        return bool(self._store.check([self.prefix + key]))

    def check_all(self, keys: list[str]) -> bool:
        """Every one of ``keys`` (full keys) is there: one round trip."""
        return bool(self._store.check(keys))

    def get(self, key: str) -> bytes:
        return bytes(self._store.get(self.prefix + key))

    def multi_get(self, keys: list[str]) -> list[bytes]:
        return [bytes(raw) for raw in self._store.multi_get(keys)]

    def drop(self) -> None:
        """Never use this store again (another job's)."""
        self._store = None

    def close(self) -> None:
        self.become(LinkState.CLOSED)
        self._store = None
        self._server = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None


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


# -- the roles of a linked node ---------------------------------------------------------------------
class _StoreRole(_OwnRanks):
    """A node's part in a job once the store answers (:class:`JudgeRole` or :class:`MemberRole`): what
    the link's thread does each second, and after the run."""

    kind = "node"

    def __init__(self, cfg: Config, ex: Exchange, tr: Transport) -> None:
        super().__init__(cfg)
        self.ex, self.tr = ex, tr

    def announce(self) -> str:
        raise NotImplementedError

    def publish(self) -> None:
        self.ex.publish_own()

    def read(self) -> None:
        raise NotImplementedError

    def sync_publish(self) -> None:
        """Publish now from the caller's thread (a verdict's dump acknowledgement cannot wait a second)."""
        if self.tr.linked():
            try:
                self.publish()
            except STORE_ERRORS as e:  # the thread's next call notices and says so
                self.ex.log.write(K_JOB_NOTE, None, note=f"publish failed ({type(e).__name__})")

    def verdict_id(self) -> Any:
        raise NotImplementedError

    def judge_node(self) -> Any:
        """The judging node as this node knows it (the partial-view note), None when unknown or this one."""
        return None

    def store_lost(self) -> None:
        """The store stopped answering during the run."""

    def after_loss(self) -> None:
        """After the run, the store gone: what this node still knows of the others is written down."""

    def exchange_records(self) -> None:
        raise NotImplementedError


class JudgeRole(_StoreRole):
    """The node that serves the store: it reads every node's value, judges every rank (and lost nodes),
    and writes the job's value (verdict, stop rule, shared table) that the others read."""

    kind = "judge"

    def __init__(self, cfg: Config, ex: Exchange, tr: Transport) -> None:
        super().__init__(cfg, ex, tr)
        self._verdict: dict[str, Any] | None = None  # the judge's verdict to publish
        self._stopping: str | None = None  # the judge ended a healthy run (--steps): tell the others
        self._table: dict[str, Any] | None = None  # the job's table, shared in the job's value
        # (gen, built at, ranks, with their ledgers)
        self._built: tuple[int, float, dict[int, RankRecord], bool] | None = None
        self._merged: tuple[tuple, RunRecord] | None = None  # (key, view) of the last poll
        self._states: tuple[RunRecord, float, dict[int, RankState]] | None = None  # (view, now, its states)
        self._remote_waiting = False  # some other node's rank waits (as of the last judgement)

    def announce(self) -> str:
        return (
            f"job store: serving {self.tr.where} for job {self.tr.addr.job!r}; this node "
            f"judges the job's {self.tr.addr.nnodes} nodes"
        )

    def publish(self) -> None:
        own = self.ex.publish_own()
        with self.ex.lock:
            verdict, stop = self._verdict, self._stopping
            items = list(self.ex.remote.items())
            wanted = bool(self.ex.wanted)
        nodes = {str(n): {"host": d.get("host"), "ranks": list(d.get("rids") or ())} for n, d in items}
        if own is not None:
            nodes[str(own["node"])] = {"host": own["host"], "ranks": [x.get("r") for x in own["ranks"]]}
        self.tr.set(
            "job",
            nodeview.envelope(
                nodeview.S_VERDICT,
                self.tr.addr.job,
                node=self.ex.node,
                host=self.ex.host,
                run_dir=self.ex.run_dir,
                verdict=verdict,
                stop=stop,
                nodes=nodes,
                table=self._table if wanted else None,
                t=time.time(),
            ),
        )

    def read(self) -> None:
        self.ex.read_nodes()

    def view(self, record: RunRecord, now: float | None = None, full: bool = True) -> RunRecord:
        now = time.time() if now is None else now
        with self.ex.lock:
            gen = self.ex.gen
        b = self._built
        # Rebuilt on a new value while a verdict may be near (a node says so, or this node's own ranks),
        # else every redraw_s (the live table, the stop rules): every path to a live verdict starts with a
        # rank that live.verdict_near sees on its own node (a wait, an end, a stall), so a job where no node
        # says so cannot give one, and a thousand ranks need not be rebuilt and judged every second. Also
        # after two seconds without a new value (the store stalls: the shift ages them), and in full.
        if (
            b is None
            or (full and not b[3])
            or now - b[1] >= self.ex.redraw_s
            or ((b[0] != gen or now - b[1] >= 2 * PUBLISH_S) and self._job_hot(record, now))
        ):
            b = self._built = (gen, now, self.ex.remote_ranks(now, full), full)
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

    def _job_hot(self, record: RunRecord, now: float) -> bool:
        """Some node's latest value says that a verdict may be near (live.verdict_near), or this node's ranks do."""
        with self.ex.lock:
            hot = bool(self.ex.hot)
        return hot or live.verdict_near(record, self.cfg, now)

    def fresh(self, now: float) -> bool:
        return self._built is not None and self._built[1] == now

    def states(self, merged: RunRecord, now: float) -> dict[int, RankState] | None:
        st = self._states
        return st[2] if st is not None and st[0] is merged and st[1] == now else None

    def _states_of(self, merged: RunRecord, now: float) -> dict[int, RankState]:
        """Every rank's state at ``now``, computed once per view (the waiting check and the verdict share it)."""
        if self._states is None or self._states[0] is not merged or self._states[1] != now:
            self._states = (merged, now, all_states(merged, now, self.cfg))  # holds merged: no id reuse
        return self._states[2]

    def anyone_waiting(self, record: RunRecord, merged: RunRecord, now: float) -> bool:
        if self.fresh(now):
            self._remote_waiting = live.anyone_waiting(merged, self.cfg, now, self._states_of(merged, now))
            return self._remote_waiting
        return self._remote_waiting or live.anyone_waiting(record, self.cfg, now)

    def verdict(self, merged: RunRecord, now: float) -> tuple[str, str] | None:
        # the job is judged on the views of every node's ranks rebuilt now (see view); lost nodes always
        fresh = self.fresh(now)
        lost = self.ex.lost_now(now)
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
            with self.ex.lock:
                self._verdict = {"mode": got[0], "reason": got[1], "t": now, "id": f"{now:.3f}"}
            self.ex.wake.set()
        return got

    def stopping(self, reason: str) -> None:
        with self.ex.lock:
            self._stopping = reason
        self.ex.wake.set()
        self.sync_publish()

    def verdict_id(self) -> Any:
        with self.ex.lock:
            return (self._verdict or {}).get("id")

    def after_dumps(self, verdict_id_wait: bool = True) -> None:
        """Wait a bounded time for the others' dumps before ending this node's ranks, so no node's ranks
        are torn down by the transport before they wrote where they were."""
        self.sync_publish()
        if not verdict_id_wait:
            return
        deadline = time.time() + DUMP_ACK_S
        while time.time() < deadline and self.tr.linked():
            with self.ex.lock:
                pending = [
                    n for n, d in self.ex.remote.items() if d.get("dumped") != self.ex.dumped and n not in self.ex.lost
                ]
            if not pending:
                return
            self.ex.wake.set()
            time.sleep(0.1)

    def table_wanted(self) -> bool:
        with self.ex.lock:
            return bool(self.ex.wanted)

    def share_table(self, table: dict[str, Any]) -> None:
        with self.ex.lock:
            self._table = table

    def exchange_records(self) -> None:
        """Gather every node's records (a node that stopped is lost), write ``done``, wait for the copies."""
        ex, tr = self.ex, self.tr
        others = [n for n in range(tr.addr.nnodes) if n != ex.node]
        finals: dict[int, dict[str, Any]] = {}
        deadline = time.time() + FINAL_WAIT_S
        while others and time.time() < deadline:
            ex.read_nodes()
            for n in list(others):
                got = ex.get_doc(f"final/{n}", nodeview.S_FINAL)
                if got is not None:
                    finals[n] = got
                    others.remove(n)
            lost = ex.lost_now(time.time(), final=True)
            for n in [n for n in others if n in lost]:
                ex.mark_lost(n, lost[n])
                others.remove(n)
            if others:
                time.sleep(0.2)
        for n in others:  # never heard of, or still running when the wait ended
            ex.mark_lost(n, ex.lost_info(n, time.time()))
        for n, doc in finals.items():
            nodeview.write_mirror(ex.mirror(n), doc)
        mine = {ex.node} if ex.node is not None else set()
        tr.set(
            "done",
            nodeview.envelope(
                nodeview.S_DONE,
                tr.addr.job,
                final=sorted(set(finals) | mine),
                lost={str(n): v for n, v in ex.lost.items()},
            ),
        )
        waiting = [n for n in finals]
        deadline = time.time() + ACK_WAIT_S
        while waiting and time.time() < deadline:
            waiting = [n for n in waiting if not tr.check(f"got/{n}")]
            if waiting:
                time.sleep(0.1)


class MemberRole(_StoreRole):
    """Every other node: it publishes its value and reads the job's (the judge's verdict, its stop rule,
    its table); after the run it copies the others' records from the judge."""

    def __init__(self, cfg: Config, ex: Exchange, tr: Transport) -> None:
        super().__init__(cfg, ex, tr)
        self.job: dict[str, Any] | None = None  # the judge's job value
        self.fetched = False  # every record of the job came from the judge (its report is the job's)
        self.judge_gone: tuple[float, dict[str, Any]] | None = None

    def announce(self) -> str:
        return f"job store: connected to {self.tr.where} (job {self.tr.addr.job!r})"

    def read(self) -> None:
        self.read_job()

    def read_job(self) -> None:
        # once the job's value exists it is never deleted: one get a second, not a check and a get (the
        # judge's store serves every node)
        if self.job is not None:
            doc, note = nodeview.parse(self.tr.get("job"), nodeview.S_VERDICT, self.tr.addr.job)
            if note:
                self.ex.note(note)
        else:
            doc = self.ex.get_doc("job", nodeview.S_VERDICT)
        if doc is not None:
            with self.ex.lock:
                first = self.job is None
                self.job = doc
            if first:
                self.ex.log.write(K_JOB, None, judge=doc.get("node"), judge_host=doc.get("host"))

    def _job_node(self) -> Any:
        return (self.job or {}).get("node", "?")

    def judge_node(self) -> Any:
        return self._job_node() if self.job else None

    def verdict(self, merged: RunRecord, now: float) -> tuple[str, str] | None:
        with self.ex.lock:
            v = (self.job or {}).get("verdict")
        return (str(v.get("mode")), f"{v.get('reason')} (judged on node {self._job_node()})") if v else None

    def stop_rule(self) -> str | None:
        with self.ex.lock:
            s = (self.job or {}).get("stop")
        return str(s) if s else None

    def job_table(self) -> tuple[dict[str, Any], Any] | None:
        with self.ex.lock:
            t = (self.job or {}).get("table")
        return (t, self._job_node()) if isinstance(t, dict) else None

    def verdict_id(self) -> Any:
        with self.ex.lock:
            return ((self.job or {}).get("verdict") or {}).get("id")

    def after_dumps(self, verdict_id_wait: bool = True) -> None:
        self.sync_publish()  # tell the judge

    def store_lost(self) -> None:
        with self.ex.lock:
            job = self.job
        if job is not None:  # the node that served the store went away
            self.judge_gone = (time.time(), job)

    def after_loss(self) -> None:
        if self.judge_gone is None:
            return
        t, job = self.judge_gone
        n = job.get("node")
        info = (job.get("nodes") or {}).get(str(n)) or {}
        if isinstance(n, int):
            self.ex.mark_lost(
                n,
                {
                    "host": info.get("host"),
                    "ranks": info.get("ranks") or [],
                    "seen": t,
                    "last_t": t,
                    "why": "the job store its ddpdoctor served stopped answering",
                },
            )

    def exchange_records(self) -> None:
        """Wait for the judge's ``done``, copy the others' records into RUN_DIR/nodes/, acknowledge."""
        ex = self.ex
        deadline = time.time() + DONE_WAIT_S + FINAL_WAIT_S
        done = None
        while time.time() < deadline:
            done = ex.get_doc("done", nodeview.S_DONE)
            if done is not None:
                break
            time.sleep(0.2)
        if done is None:
            raise _Unfinished("the judging node did not finish the exchange of records in time")
        for n in done.get("final") or ():
            if n == ex.node:
                continue
            doc = ex.get_doc(f"final/{n}", nodeview.S_FINAL)
            if doc is not None:
                nodeview.write_mirror(ex.mirror(int(n)), doc)
        for n, info in (done.get("lost") or {}).items():
            if not (isinstance(info, dict) and n.isdigit()):
                continue
            last = ex.get_doc(f"node/{n}", nodeview.S_NODE)
            ex.mark_lost(int(n), info, last)
        self.tr.set(f"got/{ex.node}", nodeview.envelope("ddpdoctor.ack", self.tr.addr.job, node=ex.node))
        self.fetched = True

    def judged_by(self) -> str | None:
        """After the exchange of records: the node that judged the job and wrote its report, when this one
        got every record from it ("node 0 (n0), its records in DIR"); else None."""
        if not self.fetched or not self.job:
            return None
        job = self.job
        where = f", its records in {job['run_dir']}" if isinstance(job.get("run_dir"), str) else ""
        return f"node {job.get('node', '?')} ({job.get('host') or 'host unknown'}){where}"


class _Unfinished(Exception):
    """The exchange of records after the run did not finish: the note says why (the partial view follows)."""


# -- the link -------------------------------------------------------------------------------------
class JobLink:
    """This node's link to the job store. The monitor calls :meth:`update` every poll, :meth:`view` for the
    record over every node's ranks, :meth:`verdict` and :meth:`finish`; the store calls run on a thread.

    Which part this node plays is known only once the store answers (the node that can bind its address
    serves it and judges): until then, and when it does not answer, the link judges this node's own ranks
    (:class:`SoloRole`); once linked, every call goes to its :class:`JudgeRole` or :class:`MemberRole`."""

    def __init__(self, addr: StoreAddr, run_dir: str, cfg: Config, say: Callable[[str], None]) -> None:
        self.addr, self.run_dir, self.cfg, self.say = addr, run_dir, cfg, say
        self.log = JsonlWriter(os.path.join(run_dir, schema.MONITOR))
        self._stop = threading.Event()
        self.transport = Transport(addr, self._stop)
        self.exchange = Exchange(self.transport, run_dir, cfg, say, self.log)
        self._wake = self.exchange.wake
        self.solo = SoloRole(cfg)  # not linked (yet, or any more): this node's own ranks
        self.role: JudgeRole | MemberRole | None = None  # set once the store answers
        self._thread = threading.Thread(target=self._run, name="ddpdoctor-jobstore", daemon=True)
        self._thread.start()

    # -- the state, for the monitor, the tests and the benchmark
    @property
    def state(self) -> LinkState:
        return self.transport.state

    @property
    def judge(self) -> bool:
        """This node serves the store and judges the job."""
        return isinstance(self.role, JudgeRole)

    @property
    def node(self) -> int | None:
        return self.exchange.node

    @node.setter
    def node(self, n: int | None) -> None:
        self.exchange.node = n

    @property
    def lost(self) -> dict[int, dict[str, Any]]:
        return self.exchange.lost

    @property
    def redraw_s(self) -> float:
        return self.exchange.redraw_s

    @redraw_s.setter
    def redraw_s(self, s: float) -> None:
        self.exchange.redraw_s = s

    @property
    def wants_table(self) -> bool:
        return self.exchange.wants_table

    @wants_table.setter
    def wants_table(self, on: bool) -> None:
        self.exchange.wants_table = on

    def _active(self) -> _OwnRanks:
        """Who answers the monitor now: the role while the store answers, else this node's own ranks."""
        return self.role if self.role is not None and self.transport.linked() else self.solo

    # -- the monitor's side (never blocks on the network) -------------------------------------
    def update(self, record: RunRecord, now: float) -> None:
        """Hand the thread this node's latest summary (at most once per PUBLISH_S)."""
        self.exchange.offer(record, now)

    def due(self, now: float) -> bool:
        """Time to publish again: the monitor reads its ranks' ledgers first (the judge's proof needs them)."""
        return self.exchange.due(now)

    def view(self, record: RunRecord, now: float | None = None, full: bool = True) -> RunRecord:
        """The record over every node's ranks (the judge), else this node's own. The other nodes' ranks
        are rebuilt when a new value arrived or a second passed (see :meth:`fresh`), this node's every poll.
        ``full=False``: without the other nodes' ledgers, as the monitor's cheap poll reads its own ranks
        (the deadlock proof reads ledgers only when some rank waits: then the monitor asks again, in full)."""
        return self._active().view(record, now, full)

    def table_wanted(self) -> bool:
        """The judge: some other node draws a live table, so the job's table is worth sharing."""
        return self._active().table_wanted()

    def share_table(self, table: dict[str, Any]) -> None:
        """The judge: the job's live table (render/live/rows.view_to_dict), published with the verdict."""
        self._active().share_table(table)

    def job_table(self) -> tuple[dict[str, Any], Any] | None:
        """The other nodes: the job's live table as the judge last drew it, and the judge's node."""
        return self._active().job_table()

    def fresh(self, now: float) -> bool:
        """This poll's view holds the other nodes' ranks as rebuilt now: the judge judges (and redraws)
        the job on these polls only, about once a second, when the other nodes' values have changed;
        in between, nothing but this node's ranks could have moved. Always true on the other nodes."""
        return self._active().fresh(now)

    def states(self, merged: RunRecord, now: float) -> dict[int, RankState] | None:
        """The judge: every rank's state in this view at ``now`` when already computed this poll (the
        monitor's status line shares it), else None."""
        return self._active().states(merged, now)

    def anyone_waiting(self, record: RunRecord, merged: RunRecord, now: float) -> bool:
        """live.anyone_waiting over the job (the judge: over every rank when :meth:`fresh`, else over this
        node's ranks and what the last judgement saw of the others), so the ledgers are read when needed."""
        return self._active().anyone_waiting(record, merged, now)

    def linked(self) -> bool:
        """The store answers: verdicts come from the judge."""
        return self.transport.linked()

    def verdict(self, merged: RunRecord, now: float) -> tuple[str, str] | None:
        """The judge: the live detectors over every rank, and lost nodes; the others: the judge's verdict.
        A node without the store: its own live verdict (today's behaviour)."""
        return self._active().verdict(merged, now)

    def stop_rule(self) -> str | None:
        """A node that is not the judge: the judge ended the run on a stop rule (--steps, --epochs)."""
        return self._active().stop_rule()

    def stopping(self, reason: str) -> None:
        """The judge: this healthy run ends on a stop rule; the others end too."""
        self._active().stopping(reason)

    def after_dumps(self, verdict_id_wait: bool = True) -> None:
        """After this node collected its stacks for a verdict: tell the judge (others), or wait a bounded
        time for the others' dumps before ending this node's ranks (the judge), so no node's ranks are torn
        down by the transport before they wrote where they were."""
        self.exchange.mark_dumped(self.role.verdict_id() if self.role is not None else None)
        self._active().after_dumps(verdict_id_wait)

    # -- after the run ------------------------------------------------------------------------
    def finish(self, record: RunRecord) -> None:
        """Exchange every node's records after the run (bounded); the others' go into RUN_DIR/nodes/."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=OP_TIMEOUT_S * 2 + 1)
        tr = self.transport
        if self.role is None or not tr.linked() or not tr.open():
            tr.become(LinkState.FOREIGN if tr.state is LinkState.FOREIGN else LinkState.UNREACHABLE)
            if self.role is not None:
                self.role.after_loss()
            self._note_partial()
            self._close()
            return
        try:
            self.exchange.send_final(record)
            self.role.exchange_records()
        except _Unfinished as e:
            self.exchange.note(str(e))
            self._note_partial()
        except STORE_ERRORS as e:  # a store that went away mid-exchange: what we have is kept
            self.exchange.note(f"the job store failed after the run ({type(e).__name__}: {str(e)[:120]})")
            self._note_partial()
        finally:
            self._close()

    def _note_partial(self) -> None:
        """No store: say which nodes this node could not see (multinode.partial-view reads it)."""
        self.log.write(
            K_JOB_NOTE,
            None,
            note=f"job store {self.transport.where} {self.state.value}",
            unreachable=True,
            foreign=self.state is LinkState.FOREIGN,
            store=self.transport.where,
            judge=self.role.judge_node() if self.role is not None else None,
        )

    def judged_by(self) -> str | None:
        """After :meth:`finish`: the node that judged the job and wrote its report, when it is another node
        and this one got every record from it ("node 0 (n0), its records in DIR"); else None."""
        return self.role.judged_by() if self.role is not None else None

    # -- the thread -------------------------------------------------------------------------------
    def _run(self) -> None:
        tr, ex = self.transport, self.exchange
        try:
            serving = tr.connect(ex.host)
        except ForeignStore as e:
            # never join another job's store: its verdicts and its records are not this job's
            tr.become(LinkState.FOREIGN)
            tr.drop()
            ex.note(
                f"job store {tr.where} is not this job's ({e}; this job is "
                f"{self.addr.job!r}): not joined; this node judges its own ranks only"
            )
            return
        except STORE_ERRORS as e:
            tr.become(LinkState.UNREACHABLE)
            ex.note(
                f"job store {tr.where} unreachable ({type(e).__name__}: "
                f"{str(e).splitlines()[0][:120] if str(e) else ''}); this node judges its own ranks only"
            )
            return
        role = self.role = (JudgeRole if serving else MemberRole)(self.cfg, ex, tr)
        if not tr.become(LinkState.LINKED):  # the monitor gave up waiting (finish) before the store answered
            return
        self.log.write(
            K_JOB,
            None,
            store=tr.where,
            role=role.kind,
            job=self.addr.job,
            source=self.addr.source,
            nnodes=self.addr.nnodes,
        )
        self.say(role.announce())
        while not self._stop.is_set():
            self._wake.wait(PUBLISH_S)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                role.publish()
                role.read()
            except STORE_ERRORS as e:
                if self._stop.is_set():
                    break
                role.store_lost()
                tr.become(LinkState.UNREACHABLE)
                ex.note(
                    f"the job store {tr.where} stopped answering "
                    f"({type(e).__name__}); this node judges its own ranks only"
                )
                return

    def _close(self) -> None:
        self.transport.close()


def link(
    torchrun_args: tuple[str, ...] | list[str],
    run_dir: str,
    cfg: Config,
    say: Callable[[str], None],
    option: str | None = None,
) -> JobRole:
    """This node's part in the run: a multi-node run's job store link (started now, on its own thread),
    or a one-node run's :class:`SoloRole`. ``option``: --job-store HOST:PORT, which wins over
    $DDPDOCTOR_JOB_STORE."""
    addr = resolve(torchrun_args, os.environ, option)
    return JobLink(addr, run_dir, cfg, say) if addr is not None else SoloRole(cfg)
