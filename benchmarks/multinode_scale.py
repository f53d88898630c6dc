"""The job store at scale: 128 simulated nodes x 8 ranks publish live summaries to one TCPStore, the judging
node's real code judges all 1,024 ranks, and one rank makes a rank-conditional collective.

    python benchmarks/multinode_scale.py                       # 128 nodes x 8 ranks, table on stdout
    python benchmarks/multinode_scale.py --nodes 16 --json out.json
    python benchmarks/multinode_scale.py --groups 8                   # 8 tensor-parallel groups of 128 ranks

What is real and what is simulated:

- **Real**: the ``torch.distributed.TCPStore`` (served by the judge's :class:`~ddpdoctor.launch.jobstore.JobLink`
  on 127.0.0.1 only, as on a rendezvous host), every node's ``JobLink`` (its thread, its own client
  connection, its once-a-second publish of ``nodeview.rank_summary`` per rank and its read of the job's
  verdict), and the judge's poll exactly as the monitor runs it (``monitor.poll_records``, ``JobLink.update``,
  ``JobLink.verdict`` with the live detectors of ``analysis/live.py`` over every rank, ``live.status_line``,
  every ``monitor.POLL_S``).
- **Simulated**: the ranks. Each rank's :class:`~ddpdoctor.record.reader.RankRecord` is built from the clock
  as a DDP training loop at ``--step-s`` per step would leave it: start/init events (node rank, host), a
  heartbeat every 0.25 s (step, the sequence number of group 0, the collective it waits in and since when,
  the user's line, in backward or not, CPU time), the time its sequence numbers and its progress last
  moved, and its newest ledger entries. Per step: a forward at ``train.py:52``, a backward with 4 DDP bucket
  all-reduces at ``train.py:54``, the loss ``all_reduce(1)`` at ``train.py:57`` (a short wait), the optimizer
  at ``train.py:58``; every rank has its own phase jitter. A rank's files are not written to disk: node 0's
  own reader is the single-node cost (measured in docs/benchmarks.md already), not the job store's.
- **The fault**: at ``--warmup + --measure`` seconds, the ranks reach the end of an epoch: every rank
  waits in ``barrier`` at ``train.py:63``, but the culprit (``--culprit``, default rank ``world/2 + 3``,
  on a node far from node 0) waits in the ``all_reduce(1)`` at ``train.py:62`` that only it calls
  (``if rank == R:``), at the same position: hang.rank-conditional-collective.
- **--groups G** (issue 50: every group judged): besides group 0 each rank belongs to one of G tensor-parallel
  groups of world/G consecutive ranks (named "1".."G", as torch names new groups), and each step opens with an
  ``all_reduce`` on it at ``train.py:50``. The fault: at its step the culprit makes one more ``all_reduce`` on its
  group (``train.py:51``) and waits there, while every other rank, its own group's included, goes on to the
  step's first DDP bucket on group 0 and waits for it: one divergence on one group strands every group.

Why processes of threads: one node is a thread loop (the driver) plus its ``JobLink`` thread and store
connection, as in the real monitor; ``--procs`` worker processes (default 4) run ``nodes/procs`` nodes
each. Processes keep the writers' Python (building and serialising 1,016 summaries a second, their GIL)
out of the judge's process, so the judge's process CPU (``time.process_time``, which includes the store
server's threads, as on a real rendezvous host) and its RSS are the judge's alone; 128 processes would
not fit the 2 cores this was measured on, and a node's cost is not the question here. Every connection
is its own, so the store sees 128 clients as on a real job. The workers and the judge share the cores,
so the latency includes contention a real job (one machine per node) would not have.

Measured: the verdict's latency after the divergence (on the judge; and when the last other node read it),
the judge's CPU per wall second in the healthy window and until the verdict (whole process, and per
thread: the monitor's poll, the job store thread, the store server and the rest), its RSS growth over
the healthy window, and false verdicts in the healthy window (there must be none). Every process is ended
(TERM, bounded wait, KILL).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import math
import os
import pstats
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from ddpdoctor.analysis import live  # noqa: E402
from ddpdoctor.analysis.config import Config  # noqa: E402
from ddpdoctor.launch import jobstore, monitor  # noqa: E402
from ddpdoctor.record import schema  # noqa: E402
from ddpdoctor.record.reader import RankRecord, RunRecord  # noqa: E402

SCRIPT = "/home/user/project/train.py"
L_FWD, L_BWD, L_LOSS, L_OPT, L_EXTRA, L_BARRIER = 52, 54, 57, 58, 62, 63
L_TP, L_TP_EXTRA = 50, 51  # --groups: the tensor-parallel all_reduce in forward, and the culprit's extra one
BUCKETS = 4  # DDP bucket all-reduces per step (they move group 0's sequence number, not the ledger)
PER_STEP = BUCKETS + 1  # + the loss all_reduce
HB_S = 0.25  # the ranks' heartbeat period
JOB = "bench-job"


def _site(line: int, func: str = "main") -> list[Any]:
    return [SCRIPT, line, func]


class SimRank:
    """One rank of a DDP loop, as its record would read at any moment (deterministic in the clock)."""

    def __init__(
        self, rank: int, node: int, local: int, world: int, t0: float, step_s: float, div_t: float, groups: int = 1
    ) -> None:
        self.rank, self.node, self.local, self.world = rank, node, local, world
        # --groups G: G tensor-parallel groups of world/G consecutive ranks, named as torch names new groups ("1"...)
        self.tp = str(1 + rank // (world // groups)) if groups > 1 else None
        self.t0, self.step_s, self.div_t = t0, step_s, div_t
        # every rank beats at its own offset, and runs a little ahead or behind (data loading, clocks)
        self.hb_off = ((rank * 7919) % 100) / 100 * HB_S
        self.jitter = (((rank * 104729) % 200) - 100) / 100 * 0.02 * step_s
        self.events = [
            {"v": 1, "kind": schema.K_START, "rank": rank, "t": t0 - 5, "pid": 10_000 + rank, "script": SCRIPT,
             "host": f"node{node:03d}", "node_rank": node, "local_rank": local},
            {"v": 1, "kind": schema.K_INIT, "rank": rank, "t": t0 - 4, "global_rank": rank, "world_size": world,
             "backend": "nccl", "site": _site(40)},
        ]  # fmt: skip
        self.rec = RankRecord(rank=rank, events=self.events, ledger_trimmed=True)

    def _phase(self, t: float) -> tuple[int, float]:
        x = (t - self.t0 - self.jitter) / self.step_s
        step = max(0, int(x))
        return step, (x - step) * self.step_s

    def _ledger(self, step: int, extra: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """The newest entries: the loss all_reduce of each step before ``step`` (done), then ``extra``."""
        out = []
        for n in range(max(0, step - 6), step):
            pos = n * PER_STEP + PER_STEP
            t = self.t0 + (n + 0.85) * self.step_s
            out.append({"v": 1, "kind": schema.K_COLL, "rank": self.rank, "t": t, "t0": t, "op": "all_reduce",
                        "group": "0", "seq": [pos, pos], "shapes": [[1]], "dtypes": ["float32"],
                        "site": _site(L_LOSS), "st": schema.ST_DONE})  # fmt: skip
        if extra:
            out.append(extra)
        return out[-6:]

    def _tp_ledger(self, step: int, base: list[dict[str, Any]], extra: dict[str, Any] | None) -> list[dict[str, Any]]:
        """--groups: the newest entries with each step's tensor-parallel all_reduce (done, at the step's start,
        its group's position ``step + 1``) among the loss all-reduces, then ``extra``."""
        out = [e for e in base if e is not extra]
        for n in range(max(0, step - 5), step + 1):
            t = self.t0 + (n + 0.02) * self.step_s
            out.append({"v": 1, "kind": schema.K_COLL, "rank": self.rank, "t": t, "t0": t, "op": "all_reduce",
                        "group": self.tp, "seq": [n + 1, n + 1], "shapes": [[8]], "dtypes": ["float32"],
                        "site": _site(L_TP, "forward"), "st": schema.ST_DONE})  # fmt: skip
        out.sort(key=lambda e: e["t0"])
        if extra:
            out.append(extra)
        return out[-8:]

    def record(self, now: float, culprit: int) -> RankRecord:
        """This rank's record as the monitor's reader would hold it at ``now``."""
        if self.tp is not None:
            return self._record_tp(now, culprit)
        return self.record_flat(now, culprit)

    def record_flat(self, now: float, culprit: int = -1) -> RankRecord:
        """The record of a DDP loop on group 0 alone (``culprit``: the rank whose epoch ends in the extra call)."""
        hb_t = self.t0 + self.hb_off + int((now - self.t0 - self.hb_off) / HB_S) * HB_S
        # the fault's step (div_t is at a step's start); each rank enters its last wait within its jitter
        div_step = int((self.div_t - self.t0) / self.step_s + 1e-6) if self.div_t < float("inf") else 1 << 62
        since = self.t0 + div_step * self.step_s + abs(self.jitter)
        step, into = self._phase(min(hb_t, since - 1e-3))
        pending: dict[str, Any] | None = None
        in_bwd = False
        if hb_t >= since:  # the epoch's end: every rank waits, at the same position, in a different call
            step = div_step
            pos = div_step * PER_STEP + 1
            mine = self.rank == culprit
            pending = {"op": "all_reduce" if mine else "barrier", "group": "0", "seq": pos,
                       "shapes": [[1]] if mine else [], "dtypes": ["float32"] if mine else [],
                       "site": _site(L_EXTRA if mine else L_BARRIER), "since": since}  # fmt: skip
            where, seq, seq_t, prog_t = pending["site"], pos, since, since
            ledger = self._ledger(step, dict(pending, v=1, kind=schema.K_COLL, rank=self.rank, t=since, t0=since,
                                             seq=[pos, pos], st=schema.ST_ISSUED))  # fmt: skip
        else:
            base = step * PER_STEP
            issued: dict[str, Any] | None = None
            f_bwd, f_loss, f_opt = 0.45, 0.85, 0.88
            if into < f_bwd * self.step_s:
                where, seq, seq_t = _site(L_FWD), base, self.t0 + step * self.step_s - 0.12 * self.step_s
            elif into < f_loss * self.step_s:
                done = int((into - f_bwd * self.step_s) / ((f_loss - f_bwd) * self.step_s / BUCKETS))
                where, seq, in_bwd = _site(L_BWD), base + done + 1, True
                seq_t = self.t0 + step * self.step_s + (f_bwd + done * (f_loss - f_bwd) / BUCKETS) * self.step_s
            elif into < f_opt * self.step_s:
                since = self.t0 + step * self.step_s + f_loss * self.step_s + self.jitter
                pending = {"op": "all_reduce", "group": "0", "seq": base + PER_STEP, "shapes": [[1]],
                           "dtypes": ["float32"], "site": _site(L_LOSS), "since": since}  # fmt: skip
                where, seq, seq_t = _site(L_LOSS), base + PER_STEP, since
                issued = dict(pending, v=1, kind=schema.K_COLL, rank=self.rank, t=since, t0=since,
                              seq=[seq, seq], st=schema.ST_ISSUED)  # fmt: skip
            else:
                where, seq, seq_t = _site(L_OPT), base + PER_STEP, self.t0 + (step + f_loss) * self.step_s
            prog_t = hb_t
            # the loss all_reduce of this step is in the ledger once issued (done once it returned)
            ledger = self._ledger(step + 1 if into >= f_opt * self.step_s else step, issued)
        hb = {"v": 1, "kind": schema.K_HB, "rank": self.rank, "t": hb_t, "step": step, "ncoll": seq,
              "seq": {"0": seq}, "pending": pending, "awaiting": None, "where": where, "in_backward": in_bwd,
              "in_ddp_forward": not in_bwd and pending is None and where[1] == L_FWD, "final": None,
              "cpu": round(prog_t - self.t0, 3)}  # fmt: skip
        # one RankRecord per rank, updated in place: the monitor's RunReader does the same
        rec = self.rec
        rec.last_hb, rec.n_hb = hb, int((hb_t - self.t0) / HB_S) + 1
        rec.seq_changed_t, rec.progress_t = seq_t, prog_t
        rec.ledger, rec.counters = ledger, {"ddp_fwd": step}
        return rec

    def _record_tp(self, now: float, culprit: int) -> RankRecord:
        """--groups: as :meth:`record`, each step opening with a tensor-parallel all_reduce on the rank's group. The
        fault: at its step the culprit makes one more all_reduce on its group (``if rank == R:``) and waits there;
        its group's other ranks, and every other rank, go on to the step's first DDP bucket on group 0 and wait
        for it (one divergence on one group strands every group: the shape of issue 50's mesh)."""
        rec = self.record_flat(now)
        hb = rec.last_hb
        step = int(hb["step"])
        div_step = int((self.div_t - self.t0) / self.step_s + 1e-6) if self.div_t < float("inf") else 1 << 62
        since = self.t0 + div_step * self.step_s + abs(self.jitter)
        extra = None
        if hb["t"] >= since:
            base = div_step * PER_STEP
            if self.rank == culprit:
                pending = {"op": "all_reduce", "group": self.tp, "seq": div_step + 2, "shapes": [[8]],
                           "dtypes": ["float32"], "site": _site(L_TP_EXTRA, "forward"), "since": since}  # fmt: skip
                seq0, tp_seq, in_bwd = base, div_step + 2, False
            else:
                pending = {"op": "all_reduce", "group": "0", "seq": base + 1, "shapes": [[4096]],
                           "dtypes": ["float32"], "site": _site(L_BWD), "since": since}  # fmt: skip
                seq0, tp_seq, in_bwd = base + 1, div_step + 1, True
            extra = dict(pending, v=1, kind=schema.K_COLL, rank=self.rank, t=since, t0=since,
                         seq=[pending["seq"], pending["seq"]], st=schema.ST_ISSUED)  # fmt: skip
            hb = dict(hb, step=div_step, pending=pending, where=pending["site"], in_backward=in_bwd,
                      in_ddp_forward=False, seq={"0": seq0, self.tp: tp_seq}, ncoll=seq0)  # fmt: skip
            step = div_step
            rec.seq_changed_t = rec.progress_t = since
        else:
            hb = dict(hb, seq={**hb["seq"], self.tp: step + 1})
        rec.last_hb = hb
        rec.ledger = self._tp_ledger(step, [e for e in rec.ledger if e.get("st") == schema.ST_DONE], extra)
        return rec


def node_record(ranks: list[SimRank], now: float, culprit: int, run_dir: str) -> RunRecord:
    """One node's RunRecord at ``now`` (what the monitor's RunReader returns)."""
    manifest = {"schema": schema.SCHEMA, "version": 1, "command": "hang", "mode": "torchrun", "script": SCRIPT}
    return RunRecord(run_dir, manifest, {r.rank: r.record(now, culprit) for r in ranks}, [])


def sim_ranks(
    node: int, per_node: int, world: int, t0: float, step_s: float, div_t: float, groups: int = 1
) -> list[SimRank]:
    """The ranks of one node (global ranks, as torchrun numbers them)."""
    return [SimRank(node * per_node + i, node, i, world, t0, step_s, div_t, groups) for i in range(per_node)]


# -- a worker process: many nodes -----------------------------------------------------------------------
def worker(a: argparse.Namespace) -> int:
    """Nodes ``a.first .. a.first + a.count - 1``: one JobLink each, driven as the monitor drives it."""
    cfg = Config()
    world = a.nodes * a.ranks_per_node
    work = tempfile.mkdtemp(prefix="ddpd-mn-worker-")
    links, ranks, dirs = {}, {}, {}
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        for n in range(a.first, a.first + a.count):
            dirs[n] = os.path.join(work, f"node{n}")
            os.makedirs(dirs[n], mode=0o700)
            addr = jobstore.StoreAddr("127.0.0.1", a.port, JOB, a.nodes, "benchmark")
            links[n] = jobstore.JobLink(addr, dirs[n], cfg, lambda _m: None)
            ranks[n] = sim_ranks(n, a.ranks_per_node, world, a.t0, a.step_s, float("inf"), a.groups)
        seen: dict[int, float] = {}
        last: dict[int, RunRecord] = {}
        div_t = None
        while not stop.is_set() and time.time() < a.until:
            now = time.time()
            if div_t is None and os.path.exists(a.div_file):  # the judge saw every node: the fault's time
                with open(a.div_file) as f:
                    div_t = float(f.read())
                for rs in ranks.values():
                    for r in rs:
                        r.div_t = div_t
            for n, link in links.items():
                if link.due(now) or n not in last:
                    last[n] = node_record(ranks[n], now, a.culprit, dirs[n])
                    link.update(last[n], now)
                # a node that is not the judge reads the judge's verdict (its own record is not judged then)
                if n not in seen and link.linked() and not link.judge and link.verdict(last[n], now) is not None:
                    seen[n] = now
            time.sleep(monitor.POLL_S)
        states = {n: link.state for n, link in links.items()}
        print(json.dumps({"seen": seen, "states": states}), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        for link in links.values():  # end every link's thread at once, then each (bounded) and its store connection
            link.stop()
        for link in links.values():
            link.close()
    return 0


# -- the judge ----------------------------------------------------------------------------------------------
def _gc_clock() -> dict[str, float]:
    """Seconds spent in the cyclic garbage collector, by the name of the thread that ran it (a dict that
    grows as collections happen)."""
    spent: dict[str, float] = {}
    started: dict[int, float] = {}

    def cb(phase: str, _info: dict[str, Any]) -> None:
        ident = threading.get_ident()
        if phase == "start":
            started[ident] = time.thread_time()
        elif ident in started:
            name = threading.current_thread().name
            spent[name] = spent.get(name, 0.0) + time.thread_time() - started.pop(ident)

    gc.callbacks.append(cb)
    return spent


class _Profiles:
    """--profile: cProfile of the judge's poll (this thread) and of the job store thread's reads and
    publications over the healthy window (the CPU figures of a profiled run are not the benchmark's)."""

    def __init__(self, job: jobstore.JobLink) -> None:
        # CPU time of the thread (the cores are shared: wall time would count the others' turns)
        self.poll, self.store = cProfile.Profile(time.thread_time), cProfile.Profile(time.thread_time)
        self.on = False
        role = job.role  # the judge's, once linked: its reads of the nodes' values and its publications
        for name in ("read", "publish"):
            orig = getattr(role, name)

            def wrapped(orig: Any = orig) -> None:
                if not self.on:
                    return orig()
                self.store.enable()
                try:
                    return orig()
                finally:
                    self.store.disable()

            setattr(role, name, wrapped)

    def start(self) -> None:
        self.on = True
        self.poll.enable()

    def stop(self, prefix: str) -> None:
        self.poll.disable()
        self.on = False
        for what, pr in (("poll", self.poll), ("store", self.store)):
            with open(f"{prefix}.{what}.txt", "w") as f:
                pstats.Stats(pr, stream=f).sort_stats("tottime").print_stats(30)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _thread_cpu(proc: psutil.Process) -> dict[int, float]:
    return {t.id: t.user_time + t.system_time for t in proc.threads()}


def _end(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)


def judge(a: argparse.Namespace) -> dict[str, Any]:
    """Serve the store, start the workers, run the judge's poll, measure; every process ended."""
    cfg = Config()
    world = a.nodes * a.ranks_per_node
    culprit = a.culprit if a.culprit is not None else min(world - 1, world // 2 + 3)
    port = a.port or _free_port()
    run_dir = tempfile.mkdtemp(prefix="ddpd-mn-judge-")
    addr = jobstore.StoreAddr("127.0.0.1", port, JOB, a.nodes, "benchmark")
    job = jobstore.JobLink(addr, run_dir, cfg, lambda m: print(f"  judge: {m}", file=sys.stderr))
    deadline = time.time() + 30
    while job.state == "connecting" and time.time() < deadline:
        time.sleep(0.05)
    if not (job.linked() and job.judge):
        raise SystemExit(f"the judge could not serve the store on 127.0.0.1:{port} ({job.state})")
    gc_s = _gc_clock()
    prof = _Profiles(job) if a.profile else None
    t0 = time.time() + 2.0
    # the workers' own deadline, should this process die without ending them
    until = t0 + a.connect + a.warmup + a.measure + a.max_wait + 60.0
    div_file = os.path.join(run_dir, "div_t")
    procs: list[subprocess.Popen] = []
    others = list(range(1, a.nodes))
    me = psutil.Process()
    result: dict[str, Any] = {}
    marks: dict[str, Any] = {}
    try:
        per = -(-len(others) // a.procs)
        for i in range(a.procs):
            part = others[i * per : (i + 1) * per]
            if not part:
                continue
            cmd = [sys.executable, "-W", "ignore", os.path.abspath(__file__), "--worker", "--first", str(part[0]),
                   "--count", str(len(part)), "--port", str(port), "--nodes", str(a.nodes), "--ranks-per-node",
                   str(a.ranks_per_node), "--t0", repr(t0), "--div-file", div_file, "--until", repr(until),
                   "--step-s", repr(a.step_s), "--culprit", str(culprit), "--groups", str(a.groups)]  # fmt: skip
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
        mine = sim_ranks(0, a.ranks_per_node, world, t0, a.step_s, float("inf"), a.groups)
        main_tid = threading.get_native_id()
        store_tid = job.thread_id()

        def refresh(full: bool = True) -> RunRecord:
            return node_record(mine, time.time(), culprit, run_dir)

        false_verdicts: list[str] = []
        verdict: tuple[str, str] | None = None
        remote_n: list[int] = []
        rss: list[tuple[float, int]] = []  # the judge's RSS every 2 s of the healthy window
        phase = "connecting"
        div_t = onset = end = t0 + a.connect
        warm_end = 0.0
        while time.time() < end:
            now = time.time()
            if phase == "warmup" and now >= warm_end:
                phase = "healthy"
                marks["healthy"] = (now, time.process_time(), me.memory_info().rss, _thread_cpu(me))
                marks["gc_healthy"] = dict(gc_s)
                marks["gc_stats0"] = [g["collections"] for g in gc.get_stats()]
                if prof:
                    prof.start()
            elif phase == "healthy" and now >= div_t:
                phase = "diverged"
                marks["diverged"] = (now, time.process_time(), me.memory_info().rss, _thread_cpu(me))
                marks["gc_diverged"] = dict(gc_s)
                marks["gc_stats1"] = [g["collections"] for g in gc.get_stats()]
                marks["gc_tracked"] = len(gc.get_objects())
                if prof:
                    prof.stop(a.profile)
            # the monitor's poll on the judging node (launch/monitor.py), off a terminal
            record, merged = monitor.poll_records(refresh, job, now)
            job.update(record, now)
            got = job.verdict(merged, now)
            if job.fresh(now):
                live.status_line(merged, cfg, now, job.states(merged, now))
            if phase == "connecting" and len(merged.ranks) == world:
                # every node is in the judge's view: warm up, measure, then the fault
                phase, marks["all_seen_s"] = "warmup", now - t0
                warm_end = now + a.warmup
                # the fault at a step's start: every rank enters its last wait within its jitter after it
                div_t = t0 + math.ceil((warm_end + a.measure - t0) / a.step_s) * a.step_s
                onset = div_t + max(abs(r.jitter) for n in range(a.nodes) for r in sim_ranks(
                    n, a.ranks_per_node, world, t0, a.step_s, div_t, a.groups))  # fmt: skip
                end = div_t + a.max_wait
                with open(div_file + ".tmp", "w") as f:
                    f.write(repr(div_t))
                os.replace(div_file + ".tmp", div_file)
                for r in mine:
                    r.div_t = div_t
            if phase in ("healthy", "diverged"):
                remote_n.append(len(merged.ranks))
            if phase == "healthy" and (not rss or now - rss[-1][0] >= 2.0):
                rss.append((now, me.memory_info().rss))
            if got is not None and now < div_t:
                false_verdicts.append(f"{now - t0:.1f} s: {got[1][:200]}")
                if isinstance(job.role, jobstore.JudgeRole):
                    job.role._verdict = None  # keep measuring: the false verdict is reported
            elif got is not None and verdict is None:
                verdict = got
                marks["verdict"] = (now, time.process_time(), me.memory_info().rss, _thread_cpu(me))
                break
            time.sleep(monitor.POLL_S)
        # the other nodes read the verdict from the store within a second or two: let them, then collect
        seen: dict[str, float] = {}
        states: dict[str, str] = {}
        if verdict is not None:
            until_seen = time.time() + 6.0
            while time.time() < until_seen:  # keep publishing the job value as the judge's monitor would
                job.update(refresh(), time.time())
                time.sleep(monitor.POLL_S)
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                out, _ = p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate(timeout=10)
            for line in (out or "").splitlines():
                if line.startswith("{"):
                    d = json.loads(line)
                    seen.update(d.get("seen") or {})
                    states.update(d.get("states") or {})
        result = _figures(a, world, culprit, marks, main_tid, store_tid, verdict, onset, seen, states)
        result["false_verdicts"] = false_verdicts
        if "gc_diverged" in marks:  # the cyclic collector's share of the healthy window, per thread
            wall = marks["diverged"][0] - marks["healthy"][0]
            gc0, gc1 = marks["gc_healthy"], marks["gc_diverged"]
            result["gc_pct"] = {k: round(100 * (v - gc0.get(k, 0.0)) / wall, 2) for k, v in gc1.items()}
            result["gc_collections"] = [b - a for a, b in zip(marks["gc_stats0"], marks["gc_stats1"])]
            result["gc_tracked_objects"] = marks["gc_tracked"]
        result["profiled"] = bool(prof)
        result["ranks_seen_min"] = min(remote_n) if remote_n else 0
        if len(rss) >= 4:  # the second half of the window: growth once the allocator has settled
            half = rss[len(rss) // 2 :]
            result["rss_growth_2nd_half_mb"] = round((half[-1][1] - half[0][1]) / 2**20, 2)
            result["rss_2nd_half_s"] = round(half[-1][0] - half[0][0], 1)
            result["rss_mb_samples"] = [round(b / 2**20, 1) for _a, b in rss]
        result["all_nodes_seen_after_s"] = round(marks.get("all_seen_s", -1.0), 1)
    finally:
        _end(procs)
        job.close()
        shutil.rmtree(run_dir, ignore_errors=True)
    if "all_seen_s" not in marks:
        raise SystemExit(f"the judge never saw all {world} ranks within --connect {a.connect:g} s")
    return result


def _figures(a, world, culprit, marks, main_tid, store_tid, verdict, onset, seen, states) -> dict[str, Any]:
    """The figures: latency from the onset (the last rank entered its final wait), CPU and RSS per window."""

    def window(m0: str, m1: str) -> dict[str, Any] | None:
        if m0 not in marks or m1 not in marks:
            return None
        (w0, c0, r0, t0), (w1, c1, r1, t1) = marks[m0], marks[m1]
        wall = max(w1 - w0, 1e-6)
        d = {k: t1.get(k, 0.0) - t0.get(k, 0.0) for k in t1}
        poll, store = d.get(main_tid, 0.0), d.get(store_tid, 0.0)
        rest = sum(d.values()) - poll - store
        return {
            "wall_s": round(wall, 2),
            "cpu_pct": round(100 * (c1 - c0) / wall, 2),
            "poll_pct": round(100 * poll / wall, 2),
            "jobstore_thread_pct": round(100 * store / wall, 2),
            "server_and_rest_pct": round(100 * rest / wall, 2),
            "rss_mb_start": round(r0 / 2**20, 1),
            "rss_growth_mb": round((r1 - r0) / 2**20, 2),
        }

    lat = marks["verdict"][0] - onset if "verdict" in marks else None
    others_seen = [float(v) - onset for v in seen.values()]
    return {
        "nodes": a.nodes,
        "ranks_per_node": a.ranks_per_node,
        "ranks": world,
        "procs": a.procs,
        "step_s": a.step_s,
        "groups": a.groups,
        "culprit": culprit,
        "healthy": window("healthy", "diverged"),
        "until_verdict": window("diverged", "verdict"),
        "verdict": verdict,
        "verdict_names_culprit": bool(verdict and f"rank {culprit}" in verdict[1]),
        "latency_s": round(lat, 2) if lat is not None else None,
        "other_nodes_seen": len(others_seen),
        "other_nodes_latency_max_s": round(max(others_seen), 2) if others_seen else None,
        "nodes_linked": sum(1 for s in states.values() if s == "linked"),
    }


def _table(r: dict[str, Any]) -> str:
    h, v = r.get("healthy") or {}, r.get("until_verdict") or {}
    rows = [
        ("ranks (nodes x ranks/node)", f"{r['ranks']} ({r['nodes']} x {r['ranks_per_node']})", ""),
        ("every node in the judge's view after", f"{r.get('all_nodes_seen_after_s')} s (start-up)", ""),
        ("ranks in the judge's view (fewest)", str(r.get("ranks_seen_min")), f"{r['ranks']}"),
        ("verdict latency after the divergence", f"{r['latency_s']} s", "<= 5 s"),
        ("... read by every other node", f"{r['other_nodes_latency_max_s']} s ({r['other_nodes_seen']} nodes)", ""),
        ("verdict names the culprit", f"{r['verdict_names_culprit']} (rank {r['culprit']})", "True"),
        ("false verdicts while healthy", str(len(r.get("false_verdicts") or [])), "0"),
        ("judge CPU, healthy (% of one core)", f"{h.get('cpu_pct')} %", "<= 2 %"),
        ("  poll / job-store thread / store server+rest",
         f"{h.get('poll_pct')} / {h.get('jobstore_thread_pct')} / {h.get('server_and_rest_pct')} %", ""),
        ("  of which the garbage collector, by thread",
         ", ".join(f"{k} {v} %" for k, v in sorted((r.get("gc_pct") or {}).items())) or "none", ""),
        ("judge CPU, divergence -> verdict", f"{v.get('cpu_pct')} %", ""),
        ("judge RSS at start of window, growth", f"{h.get('rss_mb_start')} MB, {h.get('rss_growth_mb')} MB "
         f"over {h.get('wall_s')} s", "flat"),
        ("  ... in the second half of the window", f"{r.get('rss_growth_2nd_half_mb')} MB over "
         f"{r.get('rss_2nd_half_s')} s", "flat"),
    ]  # fmt: skip
    w = max(len(a) for a, _, _ in rows)
    lines = [f"{'what':<{w}}  {'measured':<34}  goal", f"{'-' * w}  {'-' * 34}  ----"]
    lines += [f"{a:<{w}}  {b:<34}  {c}" for a, b, c in rows]
    if r.get("verdict"):
        lines.append(f"verdict: {r['verdict'][0]}: {r['verdict'][1][:300]}")
    for fv in r.get("false_verdicts") or []:
        lines.append(f"FALSE verdict at {fv}")
    return "\n".join(lines)


def main() -> int:
    """Parse the options; the judge (default) or one worker process (``--worker``, started by the judge)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nodes", type=int, default=128, help="simulated nodes, node 0 the judge (default 128)")
    p.add_argument("--ranks-per-node", type=int, default=8, help="ranks per node (default 8)")
    p.add_argument("--procs", type=int, default=4, help="worker processes for nodes 1..N-1 (default 4)")
    p.add_argument("--connect", type=float, default=180.0, help="longest wait for every node to publish (180)")
    p.add_argument("--warmup", type=float, default=10.0, help="seconds after that before the window (default 10)")
    p.add_argument("--measure", type=float, default=30.0, help="the healthy window, seconds (default 30)")
    p.add_argument("--max-wait", type=float, default=30.0, help="longest wait for the verdict (default 30)")
    p.add_argument("--step-s", type=float, default=0.5, help="seconds per training step (default 0.5)")
    p.add_argument("--culprit", type=int, default=None, help="the diverging rank (default world/2 + 3)")
    p.add_argument(
        "--groups",
        type=int,
        default=1,
        help="tensor-parallel groups of consecutive ranks besides group 0 (default 1: group 0 alone); with G > 1 the\n"
        "culprit makes one extra all_reduce on its group and every other rank waits on group 0",
    )
    p.add_argument("--port", type=int, default=0, help="the store's port on 127.0.0.1 (default: a free one)")
    p.add_argument("--json", help="write the figures here as JSON")
    p.add_argument("--profile", metavar="PREFIX", help="cProfile the healthy window into PREFIX.{poll,store}.txt")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--first", type=int, help=argparse.SUPPRESS)
    p.add_argument("--count", type=int, help=argparse.SUPPRESS)
    p.add_argument("--t0", type=float, help=argparse.SUPPRESS)
    p.add_argument("--div-file", help=argparse.SUPPRESS)
    p.add_argument("--until", type=float, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        return worker(a)
    r = judge(a)
    r["command"] = "python benchmarks/multinode_scale.py " + " ".join(sys.argv[1:])
    print(_table(r))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
    return 0 if r.get("latency_s") is not None else 1


if __name__ == "__main__":
    sys.exit(main())
