"""Start torchrun (or the user's own launch command), watch the ranks' heartbeats, stop the run on a verdict,
end the whole process tree.

torchrun starts each worker in a session of its own, so ending torchrun's process group does not end
the workers: the monitor ends every process of the tree it started, by pid (TERM, grace, KILL).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import psutil

from ddpdoctor.analysis import live
from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.state import steps_of
from ddpdoctor.launch import jobstore
from ddpdoctor.launch.timings import Timings
from ddpdoctor.record import attempts, schema
from ddpdoctor.record.reader import RunReader, RunRecord
from ddpdoctor.record.writer import JsonlWriter
from ddpdoctor.render.live import terminal as live_view
from ddpdoctor.render.live.rows import view_from_dict, view_to_dict


@dataclass(frozen=True)
class LaunchSpec:
    script: str
    script_args: tuple[str, ...]
    torchrun_args: tuple[str, ...]
    mode: str  # "torchrun" | "spawn" | "launcher" (the user's command, or torchrun --no-python: rank/enter.py)
    max_time: float | None = None
    stop_steps: int | None = None  # end the run once every rank made this many training steps (rank/steps.py)
    stop_epochs: int | None = None  # ... or iterated its DataLoader this many times
    wrapper: tuple[str, ...] = ()  # a program each rank runs under (nsys profile ...), via --no-python
    job_store: str | None = None  # --job-store HOST:PORT (multi-node), before $DDPDOCTOR_JOB_STORE
    log_dir: str | None = None  # torchrun's --log-dir of the user: the workers' logs are copied there at the end
    console_off: dict[int, int] | int = 0  # torchrun's --redirects of the user: streams kept off the console
    hidden_env: tuple[str, ...] = ()  # PET_* of the options the tool took over: not torchrun's to read again


@dataclass(frozen=True)
class Outcome:
    """How the monitored run ended, as far as the caller needs to know (the rest is in the record)."""

    interrupted: bool
    judged_by: str | None = None  # multi-node: the node that judged the job, when not this one ("node 0 (n0)")


def torchrun_cmd(spec: LaunchSpec, run_dir: str) -> list[str]:
    """The command the monitor starts: torchrun running ddpdoctor's bootstrap in every rank; in the launcher
    form the user's own command as it is, or (``--no-python``) torchrun running the user's executable."""
    if spec.mode == "launcher" and not spec.torchrun_args:
        return [spec.script, *spec.script_args]
    head = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *spec.torchrun_args,
        "--log-dir",
        os.path.join(run_dir, schema.LOGS_DIR),
        "--tee",
        "3",
    ]
    if spec.mode == "launcher":
        return [*head, "--no-python", spec.script, *spec.script_args]
    rank = ["ddpdoctor.rank", run_dir, spec.script, *spec.script_args]
    if spec.wrapper:
        return [*head, "--no-python", *spec.wrapper, sys.executable, "-u", "-m", *rank]
    return [*head, "-m", *rank]


# torchrun --tee prefixes each worker line with "[<role><local_rank>]:" (--role names the role); its own log
# lines have none.
_WORKER_LINE = re.compile(rb"^\[[A-Za-z_][\w.-]*?(\d+)\]:")


def shown(console_off: dict[int, int] | int, local_rank: int, std: int) -> bool:
    """Does a worker's line reach the console: torchrun's ``--redirects`` (``console_off``) sends the streams
    it names to the log files only (``std``: 1 stdout, 2 stderr)."""
    off = console_off.get(local_rank, 0) if isinstance(console_off, dict) else console_off
    return not off & std


def _forward(
    pipe: Any,
    out: Any | None,
    log: Any,
    std: int = 1,
    console_off: dict[int, int] | int = 0,
    every: threading.Event | None = None,
) -> None:
    """Workers' lines go to the user's terminal as torchrun prints them (less what ``--redirects`` keeps off
    it: those are in the log files only); torchrun's own agent log (its SIGTERM notices and the
    ChildFailedError traceback) goes to the run directory. ``every``: the user's own launch command, whose
    every line is the user's: to the terminal, and a copy to the run directory, until the event is set (the
    monitor ends the command: its launcher's notices of the signals it got go to the run directory only)."""
    for line in iter(pipe.readline, b""):
        m = _WORKER_LINE.match(line)
        if every is not None:
            if out is not None and not every.is_set():
                out.write(line)
                out.flush()
            log.write(line)
            log.flush()
            continue
        if m and not shown(console_off, int(m.group(1)), std):
            continue
        if out is not None and m:
            out.write(line)
            out.flush()
        else:
            log.write(line)
            log.flush()
    pipe.close()


POLL_S = 0.2  # the heartbeat period is 0.25 s: polling faster only costs the ranks CPU
_VERDICT_WORD = {
    "certain": "deadlock",
    "crash": "crash",
    "lost": "lost node",
    "timeout": "hang",
}  # the live line, by mode


def poll_records(refresh: Callable[..., RunRecord], job: jobstore.JobRole, now: float) -> tuple[RunRecord, RunRecord]:
    """One poll's records: this node's ranks (``refresh(full=...)``, e.g. RunReader.refresh) and the view
    the verdict is judged on (every node's ranks on the judging node, else the same record). The ledgers
    are read in full only when the judge publishes next or some rank waits: the deadlock proof needs them.
    A function of its own so that benchmarks/multinode_scale.py runs the judge's poll as the monitor does."""
    record = refresh(full=job.due(now))  # the judge reads our ledgers
    merged = job.view(record, now, full=False)  # every node's ranks (the judging node)
    if job.anyone_waiting(record, merged, now):
        record = refresh(full=True)  # the deadlock proof needs the ledgers
        merged = job.view(record, now, full=True)
    return record, merged


def attempt_text(record: Any) -> str:
    """``attempt 1 (restart 1 of 2)`` while the monitor follows a restarted worker group (--max-restarts), else
    "" (the first attempt reads as a run without restarts)."""
    k = record.manifest.get("attempt")
    if not isinstance(k, int) or k <= 0:
        return ""
    return f"attempt {k} (restart {k} of {attempts.max_restarts(record.manifest.get('torchrun_args'))})"


def _title(record: Any, elapsed: float) -> str:
    extra = attempt_text(record)
    return f"{record.manifest.get('command') or ''} {elapsed:.0f} s" + (f" · {extra}" if extra else "")


class Attempts:
    """Which attempt of the worker group the monitor follows (torchrun --max-restarts N: attempt k > 0 writes
    RUN_DIR/attempts/<k>/, record/attempts.py), and how many restarts torchrun has left."""

    def __init__(self, run_dir: str, torchrun_args: tuple[str, ...]) -> None:
        self.run_dir = run_dir
        self.max = attempts.max_restarts(torchrun_args)
        self.current = 0
        self.told = False  # the live line said once that torchrun restarts this attempt's group

    def newer(self) -> int | None:
        """The newest attempt that has begun since the last call, or None: one stat per poll, none without
        --max-restarts (a restart that torchrun made between two polls is skipped to the newest)."""
        k = self.current
        while k < self.max and attempts.begun(self.run_dir, k + 1):
            k += 1
        if k == self.current:
            return None
        self.current, self.told = k, False
        return k

    def left(self) -> int:
        """Restarts torchrun still has."""
        return max(0, self.max - self.current)


def _say(msg: str) -> None:
    print(f"ddpdoctor: {msg}", file=sys.stderr, flush=True)


class Monitor:
    def __init__(
        self,
        spec: LaunchSpec,
        run_dir: str,
        cfg: Config,
        live: bool = True,
        echo: bool = True,
        stdout_free: bool = False,
        timings: Timings | None = None,
    ) -> None:
        self.timings = timings or Timings()
        self.echo = echo
        self.stdout_free = stdout_free  # stdout carries a report (--json -): the workers' lines go to stderr
        self.spec = spec
        self.run_dir = run_dir
        self.cfg = cfg
        self.live = live
        self.log = JsonlWriter(os.path.join(run_dir, schema.MONITOR))
        self.seen: dict[int, psutil.Process] = {}
        self._signal: int | None = None
        self.ending = threading.Event()  # set when the monitor ends the process tree

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self._signal = signum

    def run(self) -> Outcome:
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            return self._run()
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def _run(self) -> Outcome:
        cmd = torchrun_cmd(self.spec, self.run_dir)
        tlog = os.fdopen(
            os.open(os.path.join(self.run_dir, schema.TORCHRUN_LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600),
            "ab",
        )
        try:
            env = {k: v for k, v in os.environ.items() if k not in self.spec.hidden_env}
            if self.spec.mode == "launcher":  # the probes enter the command's Python ranks through it
                from ddpdoctor.launch.entry import entry_env

                env.update(entry_env(self.run_dir, env))
            proc = subprocess.Popen(
                cmd,
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
            )
        except OSError as e:
            tlog.close()
            self.log.write(schema.K_EXIT, None, returncode=None, error=str(e))
            return Outcome(False)
        self.log.write(schema.K_SPAWNED, None, pid=proc.pid, cmd=cmd)
        out, err = (sys.stdout.buffer, sys.stderr.buffer) if self.echo else (None, None)
        if self.stdout_free and out is not None:
            out = sys.stderr.buffer
        # on a terminal: a table per rank redrawn in place (render/live/terminal.py); the workers' lines go above it
        view = live_view.start_view(sys.stderr) if self.live and self.echo else None
        say = view.say if view else _say
        rates = live_view.Rates()
        if view:
            out, err = view.route(out), view.route(err)
        every = self.ending if self.spec.mode == "launcher" and not self.spec.torchrun_args else None
        pumps = [
            threading.Thread(
                target=_forward, args=(proc.stdout, out, tlog, 1, self.spec.console_off, every), daemon=True
            ),
            threading.Thread(
                target=_forward, args=(proc.stderr, err, tlog, 2, self.spec.console_off, every), daemon=True
            ),
        ]
        for t in pumps:
            t.start()
        reader = RunReader(self.run_dir)
        follow = Attempts(self.run_dir, self.spec.torchrun_args)
        # this node's part in the job: the job store's link (multi-node), else a one-node run's null role
        job = jobstore.link(self.spec.torchrun_args, self.run_dir, self.cfg, say, self.spec.job_store)
        if self.spec.stop_steps or self.spec.stop_epochs:
            job.redraw_s = jobstore.PUBLISH_S  # a stop rule looks at every rank's steps every second
        job.wants_table = view is not None  # a node that draws the table shows the job's (the judge shares it)
        t_start = time.time()
        last_status, last_text = 0.0, None
        text: str | None = None
        verdict = None
        cpu_loop0: float | None = None
        try:
            while proc.poll() is None:
                now = time.time()
                if (k := follow.newer()) is not None:
                    # torchrun restarted the worker group: follow the new attempt's records from now on
                    reader = RunReader(attempts.attempt_dir(self.run_dir, k))
                    rates, last_text = live_view.Rates(), None
                    self.log.write(schema.K_RESTART, None, attempt=k, max_restarts=follow.max)
                    if self.live:
                        say(f"torchrun restarted the worker group: attempt {k} (restart {k} of {follow.max})")
                record, merged = poll_records(reader.refresh, job, now)
                self._remember(record)  # this node's processes only: the others' pids are not ours
                if cpu_loop0 is None and any((r.last_hb or {}).get("step", 0) for r in record.ranks.values()):
                    cpu_loop0 = time.process_time()  # the ranks' loop has begun (its steps are the per-step base)
                job.update(record, now)
                if self._signal is not None:
                    self.log.write(schema.K_KILL, None, reason=f"signal {self._signal}")
                    self.end_tree(proc)
                    break
                verdict = job.verdict(merged, now)
                if verdict and follow.left() and live.restartable(verdict[0], merged):
                    # a failed worker: torchrun's agent restarts the group itself, and the monitor follows it; a
                    # deadlock among live ranks (or a --timeout hang) ends the job below: it would come back
                    if self.live and not follow.told:
                        say(f"{verdict[1]}; torchrun restarts the worker group ({follow.left()} of {follow.max} left)")
                        follow.told = True
                    verdict = None
                if verdict:
                    self.log.write(schema.K_VERDICT, None, t=now, mode=verdict[0], reason=verdict[1])
                    if self.live and not view:
                        # where each rank is, as the verdict found them, before the verdict itself: on a busy
                        # host a short --timeout can come before the first status line was due (once a second)
                        where = live.status_line(merged, self.cfg, now, job.states(merged, now))
                        if where and where != last_text:
                            _say(where)
                            last_text = where
                    if self.live:
                        say(
                            f"{_VERDICT_WORD.get(verdict[0], 'hang')}: {verdict[1]}; "
                            "collecting stacks and stopping the run"
                        )
                    self._collect_dumps(reader)  # the current attempt's ranks read its control/
                    job.after_dumps()  # the judge waits (bounded) for the other nodes' stacks
                    self.log.write(schema.K_KILL, None, reason="verdict")
                    self.end_tree(proc)
                    break
                # the judge of a job looks at every rank once per view of them (job.fresh), not every poll
                fresh = job.fresh(now)
                done = (self._enough(merged) if fresh else None) or job.stop_rule()
                if done:
                    job.stopping(done)
                    if self.live:
                        say(f"{done}: ending the run")
                    self._settle(reader, now)
                    self.log.write(schema.K_KILL, None, reason=done)
                    self.end_tree(proc)
                    break
                if self.spec.max_time and now - t_start > self.spec.max_time:
                    self.log.write(schema.K_KILL, None, reason=f"--max-time {self.spec.max_time:g}")
                    self.end_tree(proc)
                    break
                if fresh and (view or job.table_wanted()):
                    rates.observe(merged)
                    states = job.states(merged, now)
                    table = live_view.build_view(merged, now, self.cfg, rates, _title(record, now - t_start), states)
                    if job.table_wanted():  # the judge: the job's table for the nodes that draw one
                        job.share_table(view_to_dict(table))
                    shared = job.job_table()  # the other nodes: the job's, as the judge drew it
                    if shared is not None:
                        got = view_from_dict(
                            shared[0], f"{_title(record, now - t_start)} · the job, judged on node {shared[1]}"
                        )
                        table = got or table
                    if view:
                        view.update(table)
                if view:
                    time.sleep(POLL_S)
                    continue
                if fresh:
                    text = live.status_line(merged, self.cfg, now, job.states(merged, now))
                if self.live and text and (text != last_text and now - last_status > 1.0 or now - last_status > 5.0):
                    extra = attempt_text(record)
                    _say(f"{extra}: {text}" if extra else text)
                    last_status, last_text = now, text
                time.sleep(POLL_S)
        finally:
            if proc.poll() is None:
                self.end_tree(proc)
            self._sweep()
            for t in pumps:
                t.join(timeout=self.timings.grace)
            if view:
                try:  # the last table stays on the screen: each rank's state at the end
                    final = reader.refresh(full=False)
                    view.update(
                        live_view.build_view(final, time.time(), self.cfg, rates, _title(final, time.time() - t_start))
                    )
                finally:
                    view.stop()
            tlog.close()
            if self.spec.log_dir:
                self._copy_logs(say)
        # the monitor's own CPU time (all its threads): the report's cost line states it per step, counted from
        # the ranks' first step like the ranks' own (its start, imports and torchrun's launch are no cost per
        # step: over a short run they would read as several per cent), and the whole of it beside
        cpu = time.process_time()
        self.log.write(
            schema.K_EXIT,
            None,
            returncode=proc.returncode,
            cpu_s=round(cpu, 3),
            cpu_loop_s=round(cpu - cpu_loop0, 3) if cpu_loop0 is not None else None,
        )
        job.finish(reader.refresh(full=False))  # every node's records into RUN_DIR/nodes/ (bounded)
        return Outcome(self._signal is not None, job.judged_by())

    def _copy_logs(self, say: Callable[[str], None]) -> None:
        """torchrun's worker logs, as it wrote them under the run directory (``<run id>/attempt_<n>/<local
        rank>/``), copied into the user's ``--log-dir``: what torchrun would have put there."""
        import shutil

        src = os.path.join(self.run_dir, schema.LOGS_DIR)
        dst = str(self.spec.log_dir)
        try:
            os.makedirs(dst, exist_ok=True)
            for name in os.listdir(src):
                shutil.copytree(os.path.join(src, name), os.path.join(dst, name), dirs_exist_ok=True)
        except OSError as e:
            say(f"could not copy the workers' logs to --log-dir {dst}: {e.strerror or e}")

    def _enough(self, record: Any) -> str | None:
        """The --steps / --epochs the user asked for, reached on every rank."""
        ranks = list(record.ranks.values())
        world = record.world_size
        if not ranks or (world and len(ranks) < world):
            return None
        if self.spec.stop_steps:
            steps = [steps_of(r) for r in ranks]  # training steps, whatever the job's shape (rank/steps.py)
            if min(steps) >= self.spec.stop_steps:
                return f"--steps {self.spec.stop_steps} reached"
        if self.spec.stop_epochs:
            iters = [_epochs(r.events) for r in ranks]
            if min(iters) > self.spec.stop_epochs:
                return f"--epochs {self.spec.stop_epochs} reached"
        return None

    def _settle(self, reader: RunReader, since: float) -> None:
        """Before a --steps / --epochs end: let every running rank beat twice more, so the records of the
        steps it was asked for are on disk (the profile's ranges are written after each beat; a rank
        whose whole loop fits between two beats would otherwise leave none). Bounded by ``settle``."""
        first: dict[int, float] = {}
        deadline = time.time() + self.timings.settle
        while time.time() < deadline:
            record = reader.refresh(full=False)
            waiting = 0
            for r, rec in record.ranks.items():
                if rec.event(schema.K_FINISH) is not None or not self._alive(rec.pid):
                    continue
                t = float((rec.last_hb or {}).get("t") or 0.0)
                if t > since and r not in first:
                    first[r] = t
                if not (r in first and t > first[r]):
                    waiting += 1
            if not waiting:
                return
            time.sleep(0.05)

    def _remember(self, record: Any) -> None:
        for rec in record.ranks.values():
            pid = rec.pid
            if pid and pid not in self.seen:
                try:
                    self.seen[pid] = psutil.Process(pid)
                except psutil.Error:
                    pass

    def _collect_dumps(self, reader: RunReader) -> None:
        # the reader's folder: the attempt the monitor follows (its ranks watch their own control/dump)
        path = os.path.join(reader.run_dir, schema.CONTROL_DIR, schema.DUMP_REQUEST)
        with os.fdopen(os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write("1")
        os.replace(path + ".tmp", path)
        asked = time.time()
        deadline = asked + self.timings.dump_wait
        flight_deadline = asked + self.timings.flight_wait
        while time.time() < flight_deadline:
            record = reader.refresh()
            live = {
                r: rec for r, rec in record.ranks.items() if rec.event(schema.K_FINISH) is None and self._alive(rec.pid)
            }
            stacks = [r for r, rec in live.items() if not (rec.stacks and rec.stacks.get("request", 0) >= 1)]
            if stacks and time.time() < deadline:
                time.sleep(0.05)
                continue
            # a rank's flight record of this request, where its recorder is on (written before its stacks; a rank that
            # got no further than its stacks' deadline is not waited for)
            if not any(_flight_due(reader.run_dir, r, rec, asked) for r, rec in live.items() if r not in stacks):
                return
            time.sleep(0.05)

    def _alive(self, pid: int | None) -> bool:
        p = self.seen.get(pid or -1)
        try:
            return bool(p and p.is_running() and p.status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False

    def end_tree(self, proc: subprocess.Popen) -> None:
        """TERM every process of the tree we started, wait ``grace``, KILL what is left."""
        self.ending.set()
        procs: list[psutil.Process] = []
        try:
            root = psutil.Process(proc.pid)
            procs = [root] + root.children(recursive=True)
        except psutil.Error:
            pass
        terminate(procs + [p for p in self.seen.values() if p not in procs], self.timings.grace)
        try:
            proc.wait(timeout=self.timings.grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=self.timings.grace)

    def _sweep(self) -> None:
        """Ranks (and their children) that outlived torchrun are ended too."""
        left = []
        for p in self.seen.values():
            try:
                if p.is_running():
                    left += [p] + p.children(recursive=True)
            except psutil.Error:
                pass
        terminate(left, self.timings.grace)


def _flight_due(run_dir: str, rank: int, rec: Any, asked: float) -> bool:
    """Does ``rank`` still owe the flight record of a stack request made at ``asked``? Where its recorder is on
    and its process group was made (before that, torch has recorded nothing)."""
    fl = (rec.event(schema.K_START) or {}).get("flight")
    if not (isinstance(fl, dict) and fl.get("on")) or rec.event(schema.K_INIT) is None:
        return False
    try:
        return os.stat(os.path.join(run_dir, schema.RANKS_DIR, str(rank), schema.FLIGHT)).st_mtime < asked
    except OSError:
        return True


def _epochs(events: list[dict[str, Any]]) -> int:
    """Epochs begun: DataLoader passes started from the busiest line. A peek (``next(iter(loader))``) and a
    validation loader start passes of their own every epoch, from other lines: counting all would stop a
    tutorial-style script after half of what --epochs asked for."""
    per_site: dict[str, int] = {}
    for e in events:
        if e.get("kind") == schema.K_DATALOADER:
            key = str(e.get("site"))
            per_site[key] = per_site.get(key, 0) + 1
    return max(per_site.values(), default=0)


def terminate(procs: list[psutil.Process], grace: float) -> None:
    """TERM, wait up to ``grace``, KILL, wait again: by pid (psutil checks the pid was not reused)."""
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _gone, alive = psutil.wait_procs(procs, timeout=grace)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace)
