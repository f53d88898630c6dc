"""A node's part in the job, as the monitor calls it: a one-node run's :class:`SoloRole`, and once the store
answers the :class:`JudgeRole` (it serves the store and judges every rank) or a :class:`MemberRole`."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any, Protocol

from ddpdoctor.analysis import live
from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import ranks_phrase
from ddpdoctor.analysis.state import RankState, all_states
from ddpdoctor.launch.jobstore.exchange import K_JOB, K_JOB_NOTE, PUBLISH_S, REDRAW_S, Exchange
from ddpdoctor.launch.jobstore.transport import STORE_ERRORS, Transport
from ddpdoctor.record import nodeview
from ddpdoctor.record.reader import RankRecord, RunRecord

FINAL_WAIT_S = 30.0  # after the run: how long the judge waits for a running node's records (beyond LOST_S)
DONE_WAIT_S = 45.0  # ... and a node for the judge's "done"
ACK_WAIT_S = 10.0  # the judge keeps the store up until every node has copied the records, at most this long
DUMP_ACK_S = 4.0  # after a verdict the judge waits this long for the other nodes' stack dumps before ending


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


# -- the roles of a linked node ---------------------------------------------------------------------
class _StoreRole(_OwnRanks):
    """A node's part in a job once the store answers (:class:`JudgeRole` or :class:`MemberRole`): what
    the link's thread does each second, and after the run."""

    kind = "node"

    def __init__(self, cfg: Config, ex: Exchange, tr: Transport) -> None:
        super().__init__(cfg)
        self.ex, self.tr = ex, tr
        self.lock = threading.Lock()  # this role's own state, shared by the monitor's thread and the link's

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
                self.ex.record(K_JOB_NOTE, note=f"publish failed ({type(e).__name__})")

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
        with self.lock:
            verdict, stop, table = self._verdict, self._stopping, self._table
        nodes = self.ex.node_directory(own)
        node, host, run_dir = self.ex.identity()
        wanted = self.ex.tables_wanted()
        self.tr.set(
            "job",
            nodeview.envelope(
                nodeview.S_VERDICT,
                self.tr.addr.job,
                node=node,
                host=host,
                run_dir=run_dir,
                verdict=verdict,
                stop=stop,
                nodes=nodes,
                table=table if wanted else None,
                t=time.time(),
            ),
        )

    def read(self) -> None:
        self.ex.read_nodes()

    def view(self, record: RunRecord, now: float | None = None, full: bool = True) -> RunRecord:
        now = time.time() if now is None else now
        gen = self.ex.generation()
        b = self._built
        # Rebuilt on a new value while a verdict may be near (a node says so, or this node's own ranks),
        # else every redraw_s (the live table, the stop rules): every path to a live verdict starts with a
        # rank that live.verdict_near sees on its own node (a wait, an end, a stall), so a job where no node
        # says so cannot give one, and a thousand ranks need not be rebuilt and judged every second. Also
        # after two seconds without a new value (the store stalls: the shift ages them), and in full.
        if (
            b is None
            or (full and not b[3])
            or now - b[1] >= self.ex.redraw_period()
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
        return self.ex.any_hot() or live.verdict_near(record, self.cfg, now)

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
            with self.lock:
                self._verdict = {"mode": got[0], "reason": got[1], "t": now, "id": f"{now:.3f}"}
            self.ex.wake_now()
        return got

    def stopping(self, reason: str) -> None:
        with self.lock:
            self._stopping = reason
        self.ex.wake_now()
        self.sync_publish()

    def verdict_id(self) -> Any:
        with self.lock:
            return (self._verdict or {}).get("id")

    def after_dumps(self, verdict_id_wait: bool = True) -> None:
        """Wait a bounded time for the others' dumps before ending this node's ranks, so no node's ranks
        are torn down by the transport before they wrote where they were."""
        self.sync_publish()
        if not verdict_id_wait:
            return
        deadline = time.time() + DUMP_ACK_S
        while time.time() < deadline and self.tr.linked():
            if not self.ex.undumped():
                return
            self.ex.wake_now()
            time.sleep(0.1)

    def table_wanted(self) -> bool:
        return self.ex.tables_wanted()

    def share_table(self, table: dict[str, Any]) -> None:
        with self.lock:
            self._table = table

    def exchange_records(self) -> None:
        """Gather every node's records (a node that stopped is lost), write ``done``, wait for the copies."""
        ex, tr = self.ex, self.tr
        me = ex.identity()[0]
        others = [n for n in range(tr.addr.nnodes) if n != me]
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
        mine = {me} if me is not None else set()
        tr.set(
            "done",
            nodeview.envelope(
                nodeview.S_DONE,
                tr.addr.job,
                final=sorted(set(finals) | mine),
                lost={str(n): v for n, v in ex.lost_nodes().items()},
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
            with self.lock:
                first = self.job is None
                self.job = doc
            if first:
                self.ex.record(K_JOB, judge=doc.get("node"), judge_host=doc.get("host"))

    def _job_node(self) -> Any:
        return (self.job or {}).get("node", "?")

    def judge_node(self) -> Any:
        return self._job_node() if self.job else None

    def verdict(self, merged: RunRecord, now: float) -> tuple[str, str] | None:
        with self.lock:
            v = (self.job or {}).get("verdict")
        return (str(v.get("mode")), f"{v.get('reason')} (judged on node {self._job_node()})") if v else None

    def stop_rule(self) -> str | None:
        with self.lock:
            s = (self.job or {}).get("stop")
        return str(s) if s else None

    def job_table(self) -> tuple[dict[str, Any], Any] | None:
        with self.lock:
            t = (self.job or {}).get("table")
        return (t, self._job_node()) if isinstance(t, dict) else None

    def verdict_id(self) -> Any:
        with self.lock:
            return ((self.job or {}).get("verdict") or {}).get("id")

    def after_dumps(self, verdict_id_wait: bool = True) -> None:
        self.sync_publish()  # tell the judge

    def store_lost(self) -> None:
        with self.lock:
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
        me = ex.identity()[0]
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
            if n == me:
                continue
            doc = ex.get_doc(f"final/{n}", nodeview.S_FINAL)
            if doc is not None:
                nodeview.write_mirror(ex.mirror(int(n)), doc)
        for n, info in (done.get("lost") or {}).items():
            if not (isinstance(info, dict) and n.isdigit()):
                continue
            last = ex.get_doc(f"node/{n}", nodeview.S_NODE)
            ex.mark_lost(int(n), info, last)
        self.tr.set(f"got/{me}", nodeview.envelope("ddpdoctor.ack", self.tr.addr.job, node=me))
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
