"""Probes inside one rank: a collective ledger, DDP counters and a heartbeat thread.

The training thread keeps a few ints and the collective it is in, and writes one ledger line per
collective (one ``os.write``: a rank that aborts a moment later keeps its ledger); the heartbeat thread
writes the rest. The heartbeat thread was started before any collective, so it
can still read the main thread's stack (``sys._current_frames``) while that thread sits inside a
C++ collective with the GIL released.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

from ddpdoctor.rank import failures, hooks, rankfiles, sites
from ddpdoctor.record import schema
from ddpdoctor.record.writer import JsonlWriter, MappedRingWriter, RingWriter, write_json_atomic


def _ring_size(env: str, configured: Any, default: int) -> int:
    """A ring size from the environment, else the manifest, else the default (at least 16)."""
    for v in (os.environ.get(env), configured):
        try:
            if v is not None:
                return max(16, int(v))
        except (TypeError, ValueError):
            pass
    return default


class Probe:
    def __init__(self, run_dir: str, rank: int, manifest: dict[str, Any]) -> None:
        self.run_dir = run_dir
        self.rank = rank
        d = os.path.join(run_dir, schema.RANKS_DIR, str(rank))
        os.makedirs(d, mode=0o700, exist_ok=True)
        self.dir = d
        self.events = JsonlWriter(os.path.join(d, schema.EVENTS))
        # bounded files (issue 10): the last LEDGER_RING..2x collectives (a segment counts collectives: a routine
        # one is one line, an end line rides uncounted in its collective's segment), HB_RING..2x beats
        ring = _ring_size("DDPDOCTOR_LEDGER_RING", manifest.get("ledger_ring"), schema.LEDGER_RING)
        self.hb = RingWriter(
            os.path.join(d, schema.HEARTBEAT),
            _ring_size("DDPDOCTOR_HB_RING", manifest.get("hb_ring"), schema.HB_RING),
            shared=True,
        )
        self.ledger = MappedRingWriter(os.path.join(d, schema.LEDGER), ring)
        self.stacks = JsonlWriter(os.path.join(d, schema.STACKS))
        from ddpdoctor.rank.works import WorkTracker

        self.works = WorkTracker()  # Works of async collectives until they complete (heartbeat polls)
        self.interval = float(manifest.get("heartbeat_s", 0.25))
        self.monitor_pid = manifest.get("monitor_pid")
        self.monitor_ctime = manifest.get("monitor_create_time")
        self.control = os.path.join(run_dir, schema.CONTROL_DIR, schema.DUMP_REQUEST)
        self.main_ident = threading.get_ident()
        self.pending: tuple | None = None  # (the collective's prepared call, s0, issue time ns) while in one
        self.ncoll = 0
        self.ddp_fwd = 0
        self.counters = Counters(os.path.join(d, schema.COUNTERS))
        from ddpdoctor.rank.steps import Steps

        self.steps = Steps()  # the rank's training steps, whatever the job's shape (rank/steps.py)
        self.in_ddp_fwd = False
        import weakref

        self.ddp_models: weakref.WeakSet[Any] = weakref.WeakSet()
        self.groups: dict[str, Any] = {}
        self.init_seen = False  # the init record is written (rank/wrappers.py record_init)
        # per group (count, digest) of the Python-level collectives (record/digest.py): now, at the start of
        # the ledger's current segment, at the start of the oldest segment on disk (None: nothing rotated away)
        self.digests: dict[str, tuple[int, int]] = {}
        self.dig_seg: dict[str, tuple[int, int]] = {}
        self.dig_ring: dict[str, tuple[int, int]] | None = None
        self.dig_rot = 0
        self.depth = 0
        self.timeline: Any = None  # ddpdoctor.rank.probes.profile.timeline.Timeline when the run is profiled
        # the rank probes the manifest asked for (rank/hooks.py), and their hooks as tuples of bound methods
        self.probes: list[hooks.RankProbe] = []
        self.fwd_before: tuple = ()
        self.fwd_after: tuple = ()
        self.opt_before: tuple = ()
        self.opt_after: tuple = ()
        self.tick_hooks: tuple = ()  # on_tick (heartbeat thread, after each beat): the profile drains its ranges
        self.dump_id = 0
        from ddpdoctor.rank.cost import Cost

        # ddpdoctor's own cost (rank/cost.py): the hot wrappers' sites, made here, never on the hot path
        self.cost = Cost()
        self.cost_collectives = self.cost.site("collectives")
        self.cost_forward = self.cost.site("ddp_forward")
        self.cost_opt_pre = self.cost.site("optimizer_pre")
        self.cost_opt_post = self.cost.site("optimizer_post")
        from ddpdoctor.rank.flight import Recorder

        # torch's flight recorder: every group's positions at each beat, its entries with frames in flight.json
        self.flight = Recorder()
        # the ops torch's recorder records leave the wrappers (rank/collectives.py hand_off) unless the run keeps
        # the wrappers on every op (DDPDOCTOR_COLLECTIVES=wrappers, the manifest's "collectives": a running digest
        # of every call since the start) or profiles (its communication ranges are the wrappers' timings)
        mode = manifest.get("collectives") or os.environ.get("DDPDOCTOR_COLLECTIVES") or "recorder"
        self.keep_wrappers = bool(manifest.get("profile")) or mode == "wrappers"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._c10d_at: tuple[int, int] | None = None  # the main thread's torch.distributed call at the last beat

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self, **fields: Any) -> None:
        fr = self.flight
        flight = {"on": fr.on, "buffer": fr.size, **({"off": fr.off_reason} if fr.off_reason else {})}
        self.events.write(schema.K_START, self.rank, pid=os.getpid(), flight=flight, **fields)
        if fr.on:
            from ddpdoctor.rank import onabort

            # gloo aborts a rank on a size mismatch before any beat reads its recorder: dump it then
            # (rank/onabort.py); after faulthandler, whose stack the abort still writes
            onabort.install(lambda: self.write_flight("abort"))
        self._thread = threading.Thread(target=self._run, name="ddpdoctor-heartbeat", daemon=True)
        self._thread.start()

    def finish(self, code: int | str | None, error: dict[str, Any] | None = None, **fields: Any) -> None:
        """The rank's end: its last heartbeat (where it stands: the sequence numbers a hang's judgement
        needs), the exception record ``error`` if it raised, the probes' own end records, then the finish
        event. In that order because torchrun may SIGTERM the rank at any moment once a peer died: the
        cheap, decisive records go first, with SIGTERM held back until they are written."""
        with rankfiles.sigterm_deferred():  # torchrun's SIGTERM waits for these few ms (rank/rankfiles.py)
            self.tick(final=True)
            if error is not None:
                write_json_atomic(os.path.join(self.dir, schema.ERROR), error)
            self.write_flight("raised" if error is not None else "end")
        if self.flight.on:
            from ddpdoctor.rank import onabort

            # off before interpreter finalization (rank/onabort.py): gloo's known abort of a finished rank at exit
            # stays what it is
            onabort.uninstall()
        for fin in hooks.bound(self.probes, "finish"):
            try:
                fin()
            except Exception as e:  # the other probes' and the rank's own end records still get written
                failures.hook_failed(self, fin, e)
        self.ledger.close()  # trimmed (a collective made later, at interpreter exit, opens it again)
        self.events.write(
            schema.K_FINISH,
            self.rank,
            code=code,
            ddp_fwd=self.ddp_fwd,
            **self.steps.fields(),
            ncoll=self.ncoll,
            seq=self.seqs(),
            cost=self.cost.fields(),
            **self.digest_fields(),
            **fields,
        )

    # -- the heartbeat thread -----------------------------------------------------------------
    def _run(self) -> None:
        last_check = last_tick = 0.0
        while True:
            tl = self.timeline  # profile: sample the main thread's line every few ms between ticks
            if self._stop.wait(tl.period if tl is not None and tl.period > 0 else self.interval):
                break
            try:
                now = time.monotonic()
                if tl is not None and tl.period > 0:
                    try:
                        tl.sample()
                    except Exception as e:  # a sampling bug must not stop the heartbeats
                        failures.report(self, "profile line sampler", "line samples (where each phase's time goes)", e)
                    if now - last_tick < self.interval - tl.period / 2:
                        continue
                last_tick = now
                self.cost.beat()  # this thread's CPU time so far (rank/cost.py)
                self.tick()
                if now - last_check > 1.0:
                    last_check = now
                    self._check_monitor()
            except Exception as e:  # never let a probe bug reach the user's job
                failures.report(
                    self,
                    "heartbeat thread",
                    "heartbeats after this one (the live view and the hang verdicts see this rank less often)",
                    e,
                )

    def _init_from_beat(self) -> None:
        """The init record of a default group that torch made through a name the wrapper does not hold."""
        dist = sys.modules.get("torch.distributed")
        try:
            initialized = dist is not None and dist.is_initialized()
        except Exception:
            return
        if initialized:
            from ddpdoctor.rank.wrappers import record_init

            record_init(self, dist, None)

    def write_flight(self, reason: str) -> None:
        """torch's flight record with its frames to ``flight.json`` (the rank's record of every group's
        collectives); a failure is said, never raised."""
        if not self.flight.on:
            return
        try:
            self.flight.write(os.path.join(self.dir, schema.FLIGHT), self.rank, reason)
        except Exception as e:
            failures.report(
                self, "flight recorder dump", "the collectives only torch recorded (FSDP's, DDP's buckets)", e
            )

    def seqs(self) -> dict[str, int]:
        out = {}
        for name, pg in list(self.groups.items()):
            try:
                out[name] = int(pg._get_sequence_number_for_group())
            except Exception:  # a group destroyed by the script, or a backend without sequence numbers
                pass
        return out

    def digest_fields(self) -> dict[str, Any]:
        """``digest``: {group: [count, digest]} now; ``digest0``: the same at the start of the oldest ledger
        segment on disk (absent while nothing was rotated away: the ledger holds every call)."""
        for _ in range(3):  # the training thread may add a group while this copies
            try:
                now, ring = dict(self.digests), self.dig_ring
                break
            except RuntimeError:
                continue
        else:
            return {}
        out: dict[str, Any] = {"digest": {g: list(v) for g, v in now.items()}}
        if ring is not None:
            out["digest0"] = {g: list(v) for g, v in ring.items()}
        return out

    def tick(self, final: bool = False, asked: bool = False) -> None:
        """One heartbeat: where the main thread is, every group's position, the call it waits in. ``final``:
        the rank's last; ``asked``: the beat written when the monitor asks for the stacks (``_maybe_dump``)."""
        frame = sys._current_frames().get(self.main_ident)
        pend = self.pending
        seq = self.seqs()
        pending = None
        if not self.init_seen:
            self._init_from_beat()
        inner = _c10d_call(frame)
        blocked = inner is not None and inner == self._c10d_at
        self._c10d_at = inner
        status = self.flight.status(blocked) if self.flight.on else {}
        if status:  # every group's position, FSDP's and DDP's own groups included (the wrappers' win)
            for name, pos in self.flight.positions(status).items():
                seq.setdefault(name, pos)
        if pend is not None:
            call, _s0, ns = pend  # rank/collectives.py: the prepared call, its sequence number, issue time
            pending = {
                "op": call.op,
                "group": call.gname,
                "seq": seq.get(call.gname),
                "shapes": call.shapes,
                "dtypes": call.dtypes,
                "site": call.site,
                "since": int(ns) / 1e9,
            }
        try:
            awaiting = self.works.poll()
        except Exception:
            awaiting = None
        if pending is None and awaiting is None and status:
            # a call the wrappers did not see (DDP's buckets, FSDP's, a name they do not know): the recorder's
            # entry, with the main thread's line (a call the wrappers saw has its own line in the ledger)
            pending = self.flight.pending(status, sites.user_site(frame), asked)
            if pending is not None and not _inside_c10d(frame):
                # the main thread is not inside the call: issued asynchronously, its Work (or a sync point) waited
                # on; where it was issued is in flight.json's frames, not here
                awaiting, pending = {**pending, "site": None, "n": 1, "sends": 0}, None
        self.hb.write(
            schema.K_HB,
            self.rank,
            step=self.ddp_fwd,
            steps=self.steps.n,
            ncoll=self.ncoll,
            seq=seq,
            pending=pending,
            awaiting=awaiting,
            where=sites.user_site(frame),
            in_backward=sites.in_backward(frame) if frame else False,
            in_ddp_forward=self.in_ddp_fwd,
            final=final or None,
            cpu=round(time.process_time(), 3),
            cost=self.cost.fields(),
            **self.digest_fields(),
        )
        for h in self.tick_hooks:  # the rank probes' on_tick (rank/hooks.py); a bug never stops the beats
            try:
                h()
            except Exception as e:
                failures.hook_failed(self, h, e)
        if not final and not asked:
            # after the beat is written: the read (ms, under the GIL) never delays what the monitor reads
            if not self.keep_wrappers:  # the wrappers' running digest holds every call already
                self.flight.read_chunks(status, self.rank)
            self._maybe_dump(frame)

    def _maybe_dump(self, frame: Any) -> None:
        try:
            with open(self.control, encoding="utf-8") as f:
                req = int(f.read().strip() or 0)
        except (OSError, ValueError):
            return
        if req > self.dump_id:
            self.dump_id = req
            # a verdict is being made: a beat that says what this rank waits on now (the recorder's pending call
            # is otherwise read only after it has been in flight PENDING_AFTER, and one verdict came sooner: a
            # rank blocked in Work.wait() missing from the report's blocked ranks)
            self.tick(asked=True)
            self.dump(req)

    def dump(self, req: int) -> None:
        frames = sys._current_frames()
        names = {t.ident: t.name for t in threading.enumerate()}
        threads = [
            {
                "ident": ident,
                "name": names.get(ident, "?"),
                "main": ident == self.main_ident,
                "stack": sites.stack_of(f),
            }
            for ident, f in frames.items()
            if names.get(ident) != "ddpdoctor-heartbeat"
        ]
        # the flight record first: the monitor ends the ranks once each one's stacks of this request are
        # written (launch/monitor.py's _collect_dumps), and a flight.json still being written then is lost
        # (a rank's record of FSDP's calls gone, its peer's set aside: a proven deadlock read as a timeout)
        self.write_flight(f"request {req}")
        self.stacks.write(schema.K_STACKS, self.rank, request=req, threads=threads)

    def _check_monitor(self) -> None:
        """If ddpdoctor itself was killed, end this rank rather than leave an orphan."""
        if not self.monitor_pid:
            return
        try:
            import psutil

            p = psutil.Process(self.monitor_pid)
            alive = abs(p.create_time() - float(self.monitor_ctime or 0)) < 1.0 and p.status() != "zombie"
        except Exception:
            alive = False
        if not alive:
            self.events.write(schema.K_ORPHANED, self.rank, monitor_pid=self.monitor_pid)
            os.kill(os.getpid(), signal.SIGTERM)


def _inside_c10d(frame: Any) -> bool:
    """Is the thread of ``frame`` inside one of torch.distributed's collective functions?"""
    return _c10d_call(frame) is not None


def _c10d_call(frame: Any) -> tuple[int, int] | None:
    """(identity, instruction) of the innermost frame of torch.distributed's collective functions on the thread of
    ``frame``, None outside them: the same at two beats, the thread sat in one call between them."""
    while frame is not None:
        if frame.f_code.co_filename.endswith("distributed_c10d.py"):
            return (id(frame), frame.f_lasti)
        frame = frame.f_back
    return None


class Counters:
    """Counts kept in a shared memory map of a small JSON file: the training thread updates them in
    well under a microsecond, and they survive a rank that aborts (the page cache keeps them)."""

    # "ended": [group, position] of the last routine collective that returned: the reader knows the ledger's
    # last "issued" line returned when they are its own (no end line is written for a routine call). The
    # group (its JSON text, padded) is rewritten only when it changes; the position is 12 digits in place.
    _TEMPLATE = b'{"v":1,"kind":"%s","ddp_fwd":%%12d,"ended":[%%-48s,%%12d]}\n' % schema.K_COUNTERS.encode()

    def __init__(self, path: str) -> None:
        import mmap

        self.mm = None
        self._gjs: str | None = None
        try:
            data = self._TEMPLATE % (0, b"null", 0)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            os.write(fd, data)
            self.mm = mmap.mmap(fd, len(data))
            os.close(fd)
            self._fwd_at = data.index(b'"ddp_fwd":') + len(b'"ddp_fwd":')
            self._grp_at = data.index(b'"ended":[') + len(b'"ended":[')
            self._pos_at = self._grp_at + 49
        except (OSError, ValueError):
            self.mm = None

    def set_ddp_fwd(self, n: int) -> None:
        if self.mm is not None:
            self.mm[self._fwd_at : self._fwd_at + 12] = b"%12d" % n

    def set_ended(self, gjs: str, pos: int) -> None:
        """The routine collective that just returned: its group (JSON text) and position."""
        mm = self.mm
        if mm is None:
            return
        if gjs is not self._gjs:
            g = gjs.encode()
            mm[self._grp_at : self._grp_at + 48] = (g if len(g) <= 48 else b"null").ljust(48)
            self._gjs = gjs
        mm[self._pos_at : self._pos_at + 12] = b"%12d" % pos
