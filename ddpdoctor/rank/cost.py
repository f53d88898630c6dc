"""What ddpdoctor itself costs inside one rank (issue 37), measured in thread CPU time and bounded in cost
itself.

The training thread: each hot wrapper (the collectives, ``DDP.forward``, the optimizer-step hooks) is a
``Site`` that counts its calls; one call in ``SAMPLE`` is timed with ``time.thread_time_ns`` around
ddpdoctor's own part of it (the user's collective or forward inside is timed apart and left out), and a
site's cost is its timed calls' mean times its calls. ``SAMPLE`` is prime, so a loop that makes a few calls
of one site per step (two collectives from two lines) does not always time the same one; the second call
is timed too, so that a run of a few steps has a measure. The rare dear
work (memleak's scans and censuses, each timed by its probe already) is added exactly (``Cost.exact_ns``)
and left out of the sampled call it ran in: one census in a sampled call is not multiplied by ``SAMPLE``.
Reading the thread clock costs about a microsecond (a system call): the untimed calls pay one increment
and one test, the timed ones have the timer's own cost (calibrated at start) taken off.

The background: the heartbeat thread's own CPU time (it also samples the profile's lines and the
DataLoader workers' memory), read on that thread at each beat.

Both go into every heartbeat and the finish event as ``cost`` (``ddpdoctor.analysis.cost`` makes the
report's line of them).
"""

from __future__ import annotations

import gc
import time
from typing import Any, Callable

SAMPLE = 13  # one call in this many of each site is timed
_ns = getattr(time, "thread_time_ns", time.perf_counter_ns)


def _gc_count() -> tuple[int, int]:
    """Changes whenever a collection of any generation ran (a gen-0 collection adds one to the second count,
    a gen-1 one resets it and adds one to the third, a full one resets both): a C call of ~50 ns."""
    c = gc.get_count()
    return c[1], c[2]


class Site:
    """One wrapper's calls and the thread CPU time of its timed ones."""

    __slots__ = ("name", "calls", "timed", "timed_ns", "gc_skipped")

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls = 0
        self.timed = 0
        self.timed_ns = 0
        self.gc_skipped = 0  # timed calls a garbage collection ran in: left out of the estimate

    def due(self) -> bool:
        """Count a call; is it one to time?"""
        self.calls += 1
        # the second call too (the first prepares caches): a run of a few steps gets a measure
        return self.calls % SAMPLE == 0 or self.calls == 2

    def estimate_ns(self) -> float:
        """The site's cost so far: its timed calls' mean times its calls."""
        return self.timed_ns * self.calls / self.timed if self.timed else 0.0


def _timer_cost() -> int:
    """What one read of the thread clock costs (the least of a few: a preempted read is no measure)."""
    best = None
    for _ in range(32):
        a = _ns()
        b = _ns()
        best = b - a if best is None else min(best, b - a)
    return int(best or 0)


class Span:
    """One timed call of a site: ddpdoctor's part of it, its user's part (``pause`` .. ``resume``) left out.
    A wrapper that cannot hand the user's part to a shim (its halves run apart: ``DDP.forward``'s before and
    after it, off dynamo's frame callback) holds the span between them."""

    __slots__ = ("cost", "site", "e0", "g0", "t0", "t_paused", "inner_ns")

    def __init__(self, cost: Cost, site: Site) -> None:
        self.cost, self.site = cost, site
        self.inner_ns = 0
        self.e0 = cost.exact_ns
        self.g0 = _gc_count()
        self.t_paused = 0
        self.t0 = _ns()

    def pause(self) -> None:
        """The user's part begins."""
        self.t_paused = _ns()

    def resume(self) -> None:
        """The user's part ended."""
        self.inner_ns += _ns() - self.t_paused

    def stop(self) -> None:
        """The call ended: its thread CPU time less the user's part, less what probes added exactly during it,
        less the timer's own reads, is the site's timed cost."""
        cost, site = self.cost, self.site
        spent = _ns() - self.t0 - self.inner_ns - (cost.exact_ns - self.e0) - 3 * cost.timer_ns
        # a garbage collection ran inside the call: not a measure of the wrapper. The collection costs
        # what the whole heap (the user's) costs to scan, and the allocation that crossed the threshold
        # was ours by chance (it would have been the user's next one); one such sample of ~10 ms, scaled
        # by SAMPLE, read as tens of µs per call on memleak's heap. The next timed call takes its place.
        # (unless collections land in most of the site's timed calls: then its own allocations set them off)
        if _gc_count() == self.g0 or site.gc_skipped > site.timed:
            site.timed_ns += max(0, spent)
            site.timed += 1
        else:
            site.gc_skipped += 1


class Cost:
    """One rank's account: the training thread's sites, its exact costs, the heartbeat thread's CPU time."""

    def __init__(self) -> None:
        self.sites: dict[str, Site] = {}
        self.exact_ns = 0  # scans and censuses, timed whole by their probes (thread CPU time)
        self.bg_ns = 0  # the heartbeat thread's CPU time, as of its last beat
        self.bg_first_ns: int | None = None  # ... as of its first beat after the loop's first step
        self.timer_ns = _timer_cost()
        self.t_first_step: float | None = None  # the first DDP forward's time (the step time counts from it)

    def site(self, name: str) -> Site:
        """The named site, made on first use (at install time: never on the hot path)."""
        s = self.sites.get(name)
        if s is None:
            s = self.sites[name] = Site(name)
        return s

    def add_exact(self, seconds: float) -> None:
        """Work of the training thread a probe timed itself (in thread CPU seconds)."""
        self.exact_ns += int(seconds * 1e9)

    def start(self, site: Site) -> Span:
        """A timed call of ``site`` begins (thread CPU time, from now): ``pause`` and ``resume`` around the
        user's part, ``stop`` at its end."""
        return Span(self, site)

    def timed(self, site: Site, body: Callable[..., Any], inner: Callable[..., Any], *args: Any) -> Any:
        """``body(shim, *args)`` with ``inner`` (the user's part: the collective, the forward) reached through
        ``shim``: the thread CPU time of the whole less ``inner``'s, less what probes added exactly during
        it, less the timer's own reads, is the site's timed cost."""
        span = self.start(site)

        def shim(*a: Any, **k: Any) -> Any:
            span.pause()
            try:
                return inner(*a, **k)
            finally:
                span.resume()

        try:
            return body(shim, *args)
        finally:
            span.stop()

    def train_ns(self) -> int:
        """The training thread's cost so far: the sites' estimates and the exact costs."""
        return int(sum(s.estimate_ns() for s in list(self.sites.values())) + self.exact_ns)

    def beat(self) -> None:
        """On the heartbeat thread, at each beat: its own CPU time so far, and as of the first beat after the
        loop's first step (what it cost before, its start and imports, is no cost per step)."""
        self.bg_ns = _ns()
        if self.bg_first_ns is None and self.t_first_step is not None:
            self.bg_first_ns = self.bg_ns

    def _bg_loop_ns(self) -> int:
        """The heartbeat thread's CPU time since the loop's start: none when no beat came after its first
        step (a loop shorter than a beat), all of it when there was no step."""
        if self.t_first_step is None:
            return self.bg_ns
        return self.bg_ns - self.bg_first_ns if self.bg_first_ns is not None else 0

    def fields(self) -> dict[str, Any]:
        """What the heartbeat and the finish event write: µs so far, and the calls counted."""
        return {
            "train_us": round(self.train_ns() / 1e3),
            "exact_us": round(self.exact_ns / 1e3),
            "bg_us": round(self._bg_loop_ns() / 1e3),  # since the loop's start
            "bg_total_us": round(self.bg_ns / 1e3),
            "t_first_step": self.t_first_step,
            "calls": sum(s.calls for s in list(self.sites.values())),
            "timed": sum(s.timed for s in list(self.sites.values())),
            "gc_skipped": sum(s.gc_skipped for s in list(self.sites.values())),
            # per site: [calls, timed calls, their thread CPU µs] (what the estimate is made of)
            "sites": {
                s.name: [s.calls, s.timed, round(s.timed_ns / 1e3)] for s in list(self.sites.values()) if s.calls
            },
        }
