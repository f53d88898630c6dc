"""Where the time goes: the heartbeat thread samples the main thread's innermost user line every few ms and
counts it per phase (``Timeline.phase``); the counts are written as deltas (``samples`` records) at growing
intervals. A mixin of ``timeline.Timeline``, which holds the state (``counts``, ``period``, ``phase``...)."""

from __future__ import annotations

import linecache
import sys
import threading
import time
from typing import Any

from ddpdoctor.rank import sites
from ddpdoctor.record import schema

SAMPLE_MS = 10.0  # main-thread stack sample period (0 turns sampling off) ...
SLOWDOWN_AFTER = 4000  # ... doubled each time the sample count doubles past this, up to MAX_SAMPLE_MS
MAX_SAMPLE_MS = 100.0
MAX_KEYS = 512  # distinct (phase, line) keys kept per rank; later new keys count as unknown


class LineSamples:
    p: Any
    w: Any
    step: int
    phase: str

    def init_samples(self) -> None:
        self.period = SAMPLE_MS / 1000.0
        self.slowdown_at = SLOWDOWN_AFTER
        self.counts: dict[tuple, int] = {}
        self.flushed: dict[tuple, int] = {}
        self.n_samples = 0
        self.first_sampled_step: int | None = None
        self.next_flush = time.monotonic() + 1.0
        self.flush_every = 1.0
        self.texts: set[tuple] = set()
        self.flush_lock = threading.Lock()

    # -- where the time goes: main-thread samples (heartbeat thread) --------------------------------
    def sample(self) -> None:
        """Count the main thread's innermost user line (and the user line that called it) in its phase.
        Runs on the heartbeat thread; the first step (warm-up) is not sampled."""
        if self.step < 1:
            return
        f = sys._current_frames().get(self.p.main_ident)
        phase = self.phase
        if phase.startswith("other") and self.p.pending is not None:
            phase = "collective"
        site = caller = None
        is_user = sites.is_user_file
        while f is not None:
            code = f.f_code
            if is_user(code.co_filename):
                if site is None:
                    site = (code.co_filename, f.f_lineno, code.co_name)
                else:
                    caller = (code.co_filename, f.f_lineno)
                    break
            f = f.f_back
        f = None
        key = (phase, site, caller)
        n = self.counts.get(key)
        if n is None and len(self.counts) >= MAX_KEYS:
            key = (phase, None, None)
            n = self.counts.get(key)
        self.counts[key] = (n or 0) + 1
        self.n_samples += 1
        if self.first_sampled_step is None:
            self.first_sampled_step = self.step
        if self.n_samples >= self.slowdown_at:  # enough for the shares: a long run samples less and less
            self.slowdown_at *= 2
            self.period = min(MAX_SAMPLE_MS / 1000.0, self.period * 2)

    def flush_samples(self, force: bool = False) -> None:
        """Write the counts added since the last flush (heartbeat thread; at 1, 2, 4 ... 30 s, and at the end)."""
        now = time.monotonic()
        if not force and now < self.next_flush:
            return
        with self.flush_lock:  # the heartbeat thread and finish() on the main thread
            self._flush_samples(now)

    def _flush_samples(self, now: float) -> None:
        self.flush_every = min(30.0, self.flush_every * 2)
        self.next_flush = now + self.flush_every
        rows = []
        for key, n in list(self.counts.items()):
            d = n - self.flushed.get(key, 0)
            if d <= 0:
                continue
            self.flushed[key] = n
            phase, site, caller = key
            if site is None:
                rows.append([phase, None, None, None, None, None, d, None])
                continue
            text = linecache.getline(site[0], site[1]).strip()[:120] if key not in self.texts else None
            self.texts.add(key)
            rows.append(
                [
                    phase,
                    site[0],
                    site[1],
                    site[2],
                    caller[0] if caller else None,
                    caller[1] if caller else None,
                    d,
                    text,
                ]
            )
        if rows:
            self.w.write(
                schema.K_SAMPLES,
                self.p.rank,
                period_s=self.period,
                step=self.step,
                first_step=self.first_sampled_step,
                rows=rows,
            )
