"""This node's link to the job store: the thread that connects, publishes and reads, and the role it
hands the monitor's calls to; :func:`link` gives a run its part in the job."""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.state import RankState
from ddpdoctor.launch.jobstore.address import ForeignStore, StoreAddr, resolve
from ddpdoctor.launch.jobstore.exchange import K_JOB, K_JOB_NOTE, PUBLISH_S, Exchange
from ddpdoctor.launch.jobstore.roles import JobRole, JudgeRole, MemberRole, SoloRole, _OwnRanks, _Unfinished
from ddpdoctor.launch.jobstore.transport import OP_TIMEOUT_S, STORE_ERRORS, LinkState, Transport
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord
from ddpdoctor.record.writer import JsonlWriter


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
        return self.exchange.lost_nodes()

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
    def stop(self) -> None:
        """Ask the link's thread to stop, without waiting (many links stop together, then :meth:`close`)."""
        self._stop.set()
        self._wake.set()

    def _stop_thread(self) -> None:
        """Stop the link's thread (bounded: its store calls are)."""
        self.stop()
        self._thread.join(timeout=OP_TIMEOUT_S * 2 + 1)

    def close(self) -> None:
        """Stop the thread and close the store, without the exchange of records that :meth:`finish` makes:
        for a link that is dropped (the tests, benchmarks/multinode_scale.py). Idempotent."""
        self._stop_thread()
        self._close()

    def thread_id(self) -> int | None:
        """The native id of the link's thread (benchmarks/multinode_scale.py counts its CPU time)."""
        return self._thread.native_id

    def finish(self, record: RunRecord) -> None:
        """Exchange every node's records after the run (bounded); the others' go into RUN_DIR/nodes/."""
        self._stop_thread()
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
