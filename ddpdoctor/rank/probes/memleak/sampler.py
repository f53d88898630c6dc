"""Memory probes for ``ddpdoctor memleak``: per step RSS (and CUDA allocator/NVML figures where a GPU
is in use); a cheap scan of the autograd graphs the user's own names reach; every so often a census of
all live tensors and graphs, with who holds them (``census.py``, ``holders.py``).

Per step (an optimizer step, or a DDP forward where there is no optimizer) the cost is a few clock
reads; a memory line (RSS from ``/proc/self/statm``, the allocator's figures on a GPU) is taken at every
one of the first ``EARLY_STEPS`` steps, then at most every ``SAMPLE_EVERY_S`` (every step of a slower loop);
a step with neither a line nor a scan due looks only at the censuses due to its number, the others wait for
the next line. The scans and censuses run on a schedule that gives enough points whatever the step time,
within an overhead budget:

- a census at the first step, then at steps 2, 4, 8, 16, ... (so at any moment the censuses span the
  run so far: about log2(steps) of them; up to step ``FREE_CENSUS_STEPS`` while the probes' time so far is
  at most ``FREE_CENSUS_S`` or ``FREE_SHARE`` of the run's, after that while growth is seen as long as the
  probes' time stays within ``RSS_BUDGET`` of the run's, while nothing grows at most ``DOUBLING_BUDGET``), whenever it costs at most ``BUDGET`` of that time, more often (``RSS_BUDGET``)
  while RSS keeps growing and (``GROWTH_BUDGET``) while the censuses see new highs of tensors or graph nodes
  (a growth gets enough points in the run's later half, and each such census names what grew: ``referrers.py``), at evenly spaced points when the run's length is known (``--steps``), every
  ``census_every`` steps when asked, and once more when the script returns (``final``: what module-level
  names still hold);
- the graph scan every ``LOCAL_EVERY`` steps at most, and no more often than ``SCAN_BUDGET`` of the time
  allows (``EARLY_SCAN_BUDGET`` in the first ``EARLY_STEPS`` and while the scanned graphs grow: a short
  run gets its points, and so does a leak) (a growing graph makes the scan dearer and rarer, never a drag on the loop).

A healthy loop thus pays about 2 % (issue 10: at most 1.05 in-loop with the ledger); a loop whose RSS grows pays
more, and is diagnosed. The per-step lines are kept in memory and written together every
``FLUSH_S`` (a rank killed by a signal loses at most that much of its RSS series; its censuses and the
lines before are on disk); RSS is read from ``/proc/self/statm`` through a file kept open.

DataLoader workers' USS, PSS and RSS are sampled about once a second from the heartbeat thread
(``workers.py``: copy-on-read growth shows in USS, not in RSS).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from ddpdoctor.rank import failures, nvml
from ddpdoctor.rank.hooks import RankProbe
from ddpdoctor.rank.probes.memleak import census as census_mod
from ddpdoctor.rank.probes.memleak import workers as workers_mod
from ddpdoctor.record import schema
from ddpdoctor.record.writer import JsonlWriter, line

LOCAL_EVERY = 5  # at most one graph scan per this many steps
SCAN_BUDGET = 0.002  # share of the loop's time the graph scans may take (steady state, nothing growing)
EARLY_SCAN_BUDGET = 0.02  # ... in the first EARLY_STEPS steps, and while the graphs it sees grow
EARLY_STEPS = 64  # the graph scan's early budget lasts this many steps
FREE_CENSUS_STEPS = 32  # censuses at 1, 2, 4, ..., 32 while the probes' time so far is at most
FREE_CENSUS_S = 2.0  # ... this, or FREE_SHARE of the run's time so far; later doublings within a budget
FREE_SHARE = 0.1
BUDGET = 0.0015  # share of the time a census may take in steady state
DOUBLING_BUDGET = 0.003  # ... at steps 128, 256, ... (1, 2, ..., 64: free)
RSS_BUDGET = 0.10  # ... while RSS grows
GROWTH_BUDGET = 0.05  # ... while the censuses see tensors or graph nodes set new highs
RSS_TRIGGER = 4 * 2**20  # RSS growth since the last census that makes one due (with RSS_BUDGET)
PLANNED = 8  # evenly spaced censuses when the run's length is known
# a floor of evidence, counted in steps (issue 37): while the graph scan sees growth, a census at least every
# step / FLOOR_RATIO steps (about three per doubling of the run), whatever the shares above allow; a busy
# host or a dear census must not leave a growth with too few censuses to name what grew. The floor itself is
# bounded: those censuses stop while the probes' CPU time exceeds FLOOR_CAP of the training thread's, and
# each one skipped so is counted (the report says that the ranks' CPU was saturated, not a weaker finding)
FLOOR_RATIO = 4
FLOOR_CAP = 0.25
FLUSH_S = 0.2  # the per-step lines are written together this often
SAMPLE_EVERY_S = 0.02  # a memory line at most this often after the first EARLY_STEPS (each of those steps has one)
NVML_EVERY_S = 0.5  # NVML's figures at most this often (each call costs tens of microseconds)
SNAPSHOT_ENTRIES = 100_000  # the allocator history's ring for --snapshot


# what a scan or a census costs the loop: the training thread's CPU time. Wall time would count the moments
# the thread was preempted (a loaded host), and one inflated cost puts the next scan seconds away
_cpu = getattr(time, "thread_time", time.process_time)


def _cuda_in_use() -> bool:
    """Has this process initialised CUDA (a plain flag: the per-step check costs nothing on CPU)?"""
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_initialized() and torch.cuda.is_available()


def _allocator_stats(torch: Any, dev: int) -> tuple[int, int, int]:
    """(allocated, reserved, active) bytes of the caching allocator now. The nested stats straight from
    the C++ side: ``torch.cuda.memory_stats`` flattens ~100 keys in Python on every call."""
    try:
        st = torch._C._cuda_memoryStats(dev)
        return (
            int(st["allocated_bytes"]["all"]["current"]),
            int(st["reserved_bytes"]["all"]["current"]),
            int(st["active_bytes"]["all"]["current"]),
        )
    except (AttributeError, KeyError, TypeError):  # another torch: the public, slower call
        flat = torch.cuda.memory_stats(dev)
        return (
            int(flat.get("allocated_bytes.all.current", 0)),
            int(flat.get("reserved_bytes.all.current", 0)),
            int(flat.get("active_bytes.all.current", 0)),
        )


class _RssReader:
    """This process's RSS: ``/proc/self/statm`` read through a descriptor kept open (a few microseconds),
    psutil elsewhere; the same figure as psutil's ``memory_info().rss``."""

    def __init__(self, proc: Any) -> None:
        self.proc = proc
        self.fd: int | None = None
        try:
            self.page = os.sysconf("SC_PAGE_SIZE")
            self.fd = os.open("/proc/self/statm", os.O_RDONLY)
        except (OSError, ValueError, AttributeError):
            self.fd = None

    def __call__(self) -> int:
        if self.fd is not None:
            try:
                return int(os.pread(self.fd, 128, 0).split()[1]) * self.page
            except (OSError, ValueError, IndexError):
                self.fd = None
        return int(self.proc.memory_info().rss)


class Memory(RankProbe):
    """The memory probe of one rank: a step is an optimizer step, or a DDP forward where there is none."""

    family = "memleak"
    records = "memory per step and the censuses of live tensors and graphs (growth may go unexplained)"

    def __init__(
        self, probe: Any, census_every: int | None, stop_steps: int | None = None, snapshot: bool = False
    ) -> None:
        import psutil

        self.p = probe
        self.proc = psutil.Process()
        self.rss = _RssReader(self.proc)
        self.w = JsonlWriter(os.path.join(probe.dir, schema.MEMORY))
        # per-step lines not written yet: a line's bytes, or the common line's (time, step, RSS) to format
        self.buf: list[bytes | tuple[float, int, int]] = []
        self.last_flush = 0.0
        self._head = f'{{"v":{schema.LINE_VERSION},"kind":"{schema.K_MEM}","rank":{probe.rank},"t":'
        self.census_every = census_every
        self.step = 0
        self.last_census_t = 0.0
        self.t_first = 0.0  # the first step's time (the early censuses' budget counts from it)
        self.last_census_cost = 0.0
        self.last_census_step = 0
        self.last_census_rss = 0
        self.last_scan_t = 0.0
        self.last_sample_t = 0.0  # when the last memory line was taken (SAMPLE_EVERY_S)
        self.next_line_t = 0.0  # ... and when the next one is due
        self.next_scan_t = 0.0  # when the next graph scan may run after EARLY_STEPS (_next_scan)
        self.cuda = False  # this process uses CUDA (looked at on the first step and at each flush until it does)
        self.last_rss = 0  # its RSS (what the census schedule compares with between lines)
        self.last_scan_cost = 0.0
        self.last_scan_step = 0
        self.last_scan_nodes = -1  # the most graph nodes a scan saw so far
        # growth, as a leak shows it: a new high (the counts of a healthy loop wobble below their maximum)
        self.scan_grew = False  # the last scan saw more graph nodes than any scan before
        self.census_grew = False  # the last census saw more tensors or graph nodes than any census before
        self.last_counts = (-1, -1)  # the highest (tensors, graph nodes) of the censuses so far
        self.plan = (
            sorted({max(1, round(stop_steps * i / PLANNED)) for i in range(1, PLANNED)} | {max(1, stop_steps - 2)})
            if stop_steps
            else []
        )
        self.censuses = 0
        self.cpu_first = 0.0  # the training thread's CPU time at the first step (FLOOR_CAP counts from it)
        self.floor_skipped = 0  # floor censuses the FLOOR_CAP did not allow
        self.floor_next = 0  # no floor census before this step (after one was skipped: once per gap)
        self.overhead = 0.0  # CPU seconds the scans and censuses took on the training thread
        self.names: dict = {}  # holder -> its description (name, storing line): found once
        self.growth = census_mod.Growth()  # what the censuses remember between them (census.py)
        self.summaries: dict[str, str] = {}
        self.last_nvml = 0.0
        self.snapshot = snapshot  # --snapshot: the allocator's history around the growth
        self.recording = False
        self.dumped_growth = False
        # DataLoader workers' USS/PSS/RSS, sampled on the heartbeat thread (workers.py)
        self.workers = workers_mod.Workers(probe, self.w, lambda: self.step)
        try:
            self.workers.install()
        except Exception as e:
            failures.report(
                probe,
                "memleak DataLoader workers",
                "the memory of the DataLoader's worker processes (their copy-on-read growth goes unseen)",
                e,
            )

    # -- the protocol (rank/hooks.py) ------------------------------------------------------------------
    def on_tick(self) -> None:
        self.workers.tick()

    # -- per step ------------------------------------------------------------------------------------
    def after_step(self, n: int = 0) -> None:
        """A training step ended (rank/steps.py: the one notion of a step, whatever the job's shape). The probe
        counts its own steps (``n`` is the same count); no call in between, a step of a fast loop pays for each."""
        self.step = step = self.step + 1
        now = time.perf_counter()
        # most steps of a fast loop end here: no memory line due (SAMPLE_EVERY_S) and no graph scan. Only the
        # censuses due to the step itself (--census-every, the planned ones) are looked at on them; those due
        # by time, by RSS or by the floor wait for the next line, at most SAMPLE_EVERY_S later. Such a step is
        # what a loop of millisecond steps pays most often: the whole census schedule on every one took ~9 us of
        # thread CPU after the step's forward and backward (a cold cache), these tests ~3.5 (issue 51)
        if (
            now < self.next_line_t
            and step > EARLY_STEPS
            and (step < self.last_scan_step + LOCAL_EVERY or now < self.next_scan_t)
        ):
            if self.census_every or (self.plan and step >= self.plan[0]):
                why = self._due(step, now, self.last_rss)
                if why:
                    self.census(sys._getframe(1), why, self.last_rss)
            return
        if step == 1:
            self.t_first = now
            self.cpu_first = _cpu()
        frame = sys._getframe(1)
        scan = step == 1 or (
            step - self.last_scan_step >= LOCAL_EVERY
            and now - self.last_scan_t >= self.last_scan_cost / self._scan_budget(step)
        )
        # a memory line (RSS, and the allocator's figures on a GPU) at most every SAMPLE_EVERY_S after the
        # first EARLY_STEPS: reading /proc/self/statm costs more (5-20 us) than the rest of a step's
        # bookkeeping, and a leak is a trend over many steps; a step slower than that is sampled every time
        if not (scan or step <= EARLY_STEPS or now >= self.next_line_t):
            why = self._due(step, now, self.last_rss)  # the census schedule, to the step
            if why:
                self.census(frame, why, self.last_rss)
            return
        self.last_sample_t = now
        self.next_line_t = now + SAMPLE_EVERY_S
        self.last_rss = rss = self.rss()
        if step == 1:
            self.cuda = _cuda_in_use()
        fields: dict[str, Any] = {"rss": rss, **self._cuda()} if self.cuda else {}
        if scan:
            fields.setdefault("rss", rss)
            c0 = _cpu()
            try:
                nodes, roots, holder = census_mod.local_graphs(frame, self.names, self.growth)
                fields["local_graph"] = nodes
                self.scan_grew = nodes > self.last_scan_nodes >= 0
                self.last_scan_nodes = max(nodes, self.last_scan_nodes)
                fields["local_roots"] = roots
                if holder:
                    fields["local_holder"] = holder
            except Exception as e:
                failures.report(
                    self.p,
                    "memleak graph scan",
                    "the scan of the autograd graphs the script's names reach (a kept graph may go without its holder)",
                    e,
                )
            cost = _cpu() - c0
            self.last_scan_cost, self.last_scan_t, self.last_scan_step = cost, time.perf_counter(), step
            self._next_scan()
            self.overhead += cost
            self.p.cost.add_exact(cost)  # exact: never multiplied as a sampled call's (rank/cost.py)
        if fields:
            self.buf.append(line(schema.K_MEM, self.p.rank, step=step, **fields))
        else:  # the common line: (time, step, RSS), formatted at the flush, all together (warm, not per step)
            self.buf.append((time.time(), step, rss))
        if now - self.last_flush >= FLUSH_S or len(self.buf) >= 512:
            self.flush(now)
        why = self._due(step, now, rss)
        if why:
            self.census(frame, why, rss)

    on_step = after_step  # (a step without its number: the tests' fake loops)

    def _scan_budget(self, step: int) -> float:
        """The graph scans' share of the time now: the early one in the first steps and while growth is seen."""
        return EARLY_SCAN_BUDGET if step <= EARLY_STEPS or self.scan_grew or self.census_grew else SCAN_BUDGET

    def _next_scan(self) -> None:
        """When the next graph scan may run after ``EARLY_STEPS`` (the budget of the time since the last one),
        kept for the per-step test of ``on_step``; set again whenever the last scan or the growth seen changes."""
        budget = EARLY_SCAN_BUDGET if self.scan_grew or self.census_grew else SCAN_BUDGET
        self.next_scan_t = self.last_scan_t + self.last_scan_cost / budget

    def flush(self, now: float | None = None) -> None:
        """Write the per-step lines kept so far (one ``os.write``)."""
        self.last_flush = time.perf_counter() if now is None else now
        if not self.cuda:  # CUDA first used after the first step: the lines have its figures from here on
            self.cuda = self.step > 0 and _cuda_in_use()
        if self.buf:
            head = self._head
            data = b"".join(
                x if type(x) is bytes else f'{head}{x[0]!r},"step":{x[1]},"rss":{x[2]}}}\n'.encode() for x in self.buf
            )
            self.buf = []
            self.w.write_bytes(data)

    def _due(self, step: int, now: float, rss: int) -> str | None:
        if step == 1:
            return "first"
        if self.census_every:
            return "every" if step % self.census_every == 0 else None
        if self.plan and step >= self.plan[0]:
            while self.plan and step >= self.plan[0]:
                self.plan.pop(0)
            return "planned"
        since = now - self.last_census_t
        # the early doublings are free while the probes' time so far is small: a census over a heap of
        # millions of objects (a Dataset of Python dicts) costs seconds, and then takes its budget like any other
        free = self.last_census_step < FREE_CENSUS_STEPS and self.overhead <= max(
            FREE_CENSUS_S, FREE_SHARE * (now - self.t_first)
        )
        if step >= 2 * self.last_census_step and (
            free
            # while growth is seen: doublings as long as the probes' time stays within RSS_BUDGET of the run's
            or (
                (self.scan_grew or self.census_grew)
                and self.overhead <= max(FREE_CENSUS_S, RSS_BUDGET * (now - self.t_first))
            )
            or since >= self.last_census_cost / DOUBLING_BUDGET
        ):
            return "doubling"
        if (
            self.census_grew
            and step - self.last_census_step >= LOCAL_EVERY
            and since >= self.last_census_cost / GROWTH_BUDGET
        ):
            return "growth"  # the last census saw a new high: more points while it grows, and its holders
        if since >= self.last_census_cost / BUDGET:
            return "budget"
        if rss - self.last_census_rss >= RSS_TRIGGER and since >= self.last_census_cost / RSS_BUDGET:
            return "rss"
        return self._floor(step, rss)

    def _floor(self, step: int, rss: int) -> str | None:
        """The floor of censuses while growth is seen (``FLOOR_RATIO``), in steps: due when the last census
        is ``step / FLOOR_RATIO`` steps behind, unless the probes' CPU time is over ``FLOOR_CAP`` of the
        training thread's (then counted as skipped, once per gap). Only integer comparisons on most steps."""
        gap = max(LOCAL_EVERY, step // FLOOR_RATIO)
        if step <= FREE_CENSUS_STEPS or step - self.last_census_step < gap or step < self.floor_next:
            return None  # (the doublings up to FREE_CENSUS_STEPS are free: the floor adds nothing there)
        # the growth a holder is searched for: the graph scan's new highs. Not RSS or the censuses' counts: a
        # cache that fills once (probes/plateau.py) would get extra censuses in its fill, and a short series
        # dense in its rise and sparse on its plateau reads as growth (analysis/series.py)
        if not self.scan_grew:
            return None
        if self.overhead <= max(FREE_CENSUS_S / 4, FLOOR_CAP * (_cpu() - self.cpu_first)):
            return "floor"
        self.floor_skipped += 1
        self.floor_next = step + gap
        return None

    def _cuda(self) -> dict[str, Any]:
        """The caching allocator's allocated / reserved / active bytes of this step; NVML's figures (the
        device's, and this process's, which count what the allocator does not: NCCL's buffers, cuBLAS
        workspaces) about once every ``NVML_EVERY_S``; the first ``memory_summary`` and, on request, the
        start of the allocator's history for ``--snapshot``."""
        torch = sys.modules.get("torch")
        try:
            dev = torch.cuda.current_device()
            st = _allocator_stats(torch, dev)
            out: dict[str, Any] = {
                "cuda_allocated": st[0],
                "cuda_reserved": st[1],
                "cuda_active": st[2],
            }
        except Exception as e:
            failures.report(self.p, "memleak CUDA figures", "the CUDA caching allocator's figures per step", e)
            return {}
        now = time.perf_counter()
        if now - self.last_nvml >= NVML_EVERY_S:
            self.last_nvml = now
            out.update(self._nvml(dev))
        if "first" not in self.summaries:
            try:
                self.summaries["first"] = torch.cuda.memory_summary(dev)
                self._write_summary("first")
            except Exception as e:
                failures.report(self.p, "memleak CUDA summary", "torch.cuda.memory_summary() of this rank", e)
                self.summaries["first"] = ""
            if self.snapshot:
                self._start_history(torch)
        return out

    def _nvml(self, dev: int) -> dict[str, Any]:
        try:
            import pynvml

            h = nvml.handle(dev)
            info = pynvml.nvmlDeviceGetMemoryInfo(h)
            out = {"nvml_used": int(info.used), "nvml_total": int(info.total)}
        except Exception as e:
            failures.report(self.p, "memleak NVML", "NVML's GPU memory figures (device and this process)", e)
            return {}
        try:
            pid = os.getpid()
            mine = [p for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h) if p.pid == pid]
            if mine and mine[0].usedGpuMemory is not None:
                out["nvml_process"] = int(mine[0].usedGpuMemory)
        except Exception as e:
            # in a container NVML may list host pids, or none: the device figure stays
            failures.report(self.p, "memleak NVML process", "NVML's memory of this process (outside the allocator)", e)
        return out

    def _start_history(self, torch: Any) -> None:
        """``--snapshot``: record the allocator's history (every alloc/free with its stack) from the first
        step, in a ring of ``SNAPSHOT_ENTRIES``; dumped when a census first sees growth and at the end."""
        try:
            torch.cuda.memory._record_memory_history(max_entries=SNAPSHOT_ENTRIES)
            self.recording = True
        except Exception as e:
            failures.report(self.p, "memleak --snapshot", "the CUDA allocator's history (--snapshot)", e)

    def _dump_snapshot(self, which: str) -> None:
        torch = sys.modules.get("torch")
        path = os.path.join(self.p.dir, schema.CUDA_SNAPSHOT.format(which))
        try:
            torch.cuda.memory._dump_snapshot(path)
            os.chmod(path, 0o600)
            self.w.write(schema.K_CUDA_SNAPSHOT, self.p.rank, step=self.step, which=which, path=path)
        except Exception as e:
            failures.report(self.p, "memleak --snapshot", "the CUDA allocator's history (--snapshot)", e)

    def _write_summary(self, which: str) -> None:
        text = self.summaries.get(which)
        if text:
            path = os.path.join(self.p.dir, schema.CUDA_SUMMARY.format(which))
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)

    # -- census --------------------------------------------------------------------------------------
    def census(self, frame: Any, why: str, rss: int | None = None, final: bool = False) -> None:
        self.flush()
        c0 = _cpu()
        try:
            fields = census_mod.census(frame, self.names, self.growth)
        except Exception as e:
            failures.report(
                self.p,
                "memleak census",
                "censuses of live tensors and graphs (growth may go unexplained, without a holder or a line)",
                e,
            )
            return
        fields["workers"] = self._worker_rss()
        fields["uss"] = self._uss()
        fields["host_available"] = self._available()
        cost = _cpu() - c0
        counts = (int(fields.get("tensors") or 0), int(fields.get("graph_nodes") or 0))
        if not final:
            hi = self.last_counts
            self.census_grew = hi[0] >= 0 and (counts[0] > hi[0] or counts[1] > hi[1])
            self.last_counts = (max(hi[0], counts[0]), max(hi[1], counts[1]))
            self._next_scan()  # the scans' budget follows the growth seen
        self.last_census_cost, self.last_census_t = cost, time.perf_counter()
        self.last_census_step = self.step
        self.last_census_rss = rss if rss is not None else self.last_census_rss
        self.censuses += 1
        self.p.cost.add_exact(cost)
        if not final:
            self.overhead += cost
        self.w.write(
            schema.K_CENSUS,
            self.p.rank,
            step=self.step,
            why=why,
            final=final or None,
            cost_s=round(cost, 4),
            floor_skipped=self.floor_skipped or None,  # so far: the report says the floor could not be kept
            **fields,
        )
        if not final and _cuda_in_use():
            self._cuda_at_census()

    def _cuda_at_census(self) -> None:
        """The allocator's ``memory_summary`` as of this census (the growing rank's is the one to read), and
        with ``--snapshot`` the history dumped the first time a census sees growth."""
        try:
            self.summaries["census"] = sys.modules["torch"].cuda.memory_summary()
            self._write_summary("census")
        except Exception as e:
            failures.report(self.p, "memleak CUDA summary", "torch.cuda.memory_summary() of this rank", e)
        if self.recording and self.census_grew and not self.dumped_growth:
            self.dumped_growth = True
            self._dump_snapshot("growth")

    def _available(self) -> int | None:
        try:
            import psutil

            return int(psutil.virtual_memory().available)
        except Exception:
            return None

    def _uss(self) -> int | None:
        try:
            return int(self.proc.memory_full_info().uss)
        except Exception:
            return None

    def _worker_rss(self) -> dict[str, int]:
        """RSS of this rank's worker processes (DataLoader workers are multiprocessing children: listed
        without scanning /proc)."""
        import multiprocessing

        import psutil

        out = {}
        for c in multiprocessing.active_children():
            try:
                out[str(c.pid)] = int(psutil.Process(c.pid).memory_info().rss)
            except Exception:  # a worker that just exited has no memory to count
                pass
        return out

    def finish(self) -> None:
        """The script has returned: its functions' locals are gone, module-level names remain. One last
        census (``final``) records what they still hold, and the overhead the probes took."""
        self.flush()
        try:
            if self.step:
                self.census(None, "finish", final=True)
            self.w.write(
                schema.K_MEM_OVERHEAD,
                self.p.rank,
                step=self.step,
                censuses=self.censuses,
                overhead_s=round(self.overhead, 4),
                floor_skipped=self.floor_skipped or None,
                searches_capped=self.growth.capped or None,
                workers_cpu_s=round(self.workers.cpu, 4) or None,  # the heartbeat thread's, not the loop's
            )
        except Exception as e:
            failures.report(
                self.p,
                "memleak final census",
                "the census at the end of the script (what module-level names still hold)",
                e,
            )
        try:
            if _cuda_in_use():
                self.summaries["last"] = sys.modules["torch"].cuda.memory_summary()
            self._write_summary("last")
        except Exception as e:
            failures.report(self.p, "memleak CUDA summary", "torch.cuda.memory_summary() of this rank", e)
        if self.recording:
            self._dump_snapshot("last")
            try:
                sys.modules["torch"].cuda.memory._record_memory_history(enabled=None)
            except Exception as e:
                failures.report(self.p, "memleak --snapshot", "the CUDA allocator's history (--snapshot)", e)
        elif self.snapshot:
            # asked for, but this rank never used CUDA: said in the report, not silently absent
            self.w.write(schema.K_CUDA_SNAPSHOT, self.p.rank, step=self.step, which="none", path=None)


def install(probe: Any, settings: Any = None) -> Memory:
    """The memory probe; ``settings``: {"census_every": N or None}; the run's --steps come from the manifest."""
    census_every = settings.get("census_every") if isinstance(settings, dict) else None
    snapshot = bool(settings.get("snapshot")) if isinstance(settings, dict) else False
    stop = None
    try:
        from ddpdoctor.rank.rankfiles import read_manifest

        stop = (read_manifest(probe.run_dir).get("stop") or {}).get("steps")
    except Exception:  # no --steps: the census schedule does not aim at a last step
        pass
    return Memory(probe, census_every, int(stop) if stop else None, snapshot)
