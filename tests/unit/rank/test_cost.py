"""ddpdoctor's own cost in a rank (rank/cost.py): one call in SAMPLE (and the second) of a site is timed in
thread CPU time, the user's part (the shim) and the probes' exact costs are left out of it, the estimate
scales the timed calls to all of them, and the heartbeat thread's time before the loop is not per step."""

from __future__ import annotations

import time

from ddpdoctor.rank import cost


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_one_call_in_sample_is_timed_and_the_estimate_covers_them_all() -> None:
    s = cost.Site("x")
    due = [s.due() for _ in range(10 * cost.SAMPLE)]
    assert due.count(True) == 11 and due[1] and due[cost.SAMPLE - 1]  # the 2nd, then every SAMPLE-th
    s.timed, s.timed_ns = 4, 4_000
    assert s.estimate_ns() == 1_000 * s.calls


def test_the_users_part_and_exact_costs_are_left_out_of_a_timed_call() -> None:
    c = cost.Cost()
    s = c.site("collectives")

    def body(shim, own_s: float, exact_s: float) -> str:
        _spin(own_s)  # ddpdoctor's own bookkeeping
        shim(0.02)  # the user's collective: not ours
        _spin(exact_s)
        c.add_exact(exact_s)  # a census, timed by its probe
        return "out"

    s.due()
    assert c.timed(s, body, _spin, 0.002, 0.01) == "out"
    assert s.timed == 1 and 1.5e6 <= s.timed_ns <= 6e6, s.timed_ns  # about the 2 ms of its own, not 32
    assert c.exact_ns == 10_000_000 and c.train_ns() == s.timed_ns + c.exact_ns  # one call, timed
    f = c.fields()
    assert f["sites"]["collectives"][:2] == [1, 1] and f["exact_us"] == 10_000


def test_a_timed_call_a_garbage_collection_ran_in_is_left_out() -> None:
    """The collection scans the user's heap; our allocation only happened to set it off. The next timed call
    takes its place, unless collections fall in most of the site's timed calls (its own allocations)."""
    import gc

    c = cost.Cost()
    s = c.site("collectives")

    def body(shim, collect: bool) -> None:
        if collect:
            gc.collect(0)
        shim(0.0)

    c.timed(s, body, _spin, True)
    assert s.timed == 0 and s.gc_skipped == 1 and s.timed_ns == 0
    c.timed(s, body, _spin, False)
    assert s.timed == 1 and s.gc_skipped == 1
    c.timed(s, body, _spin, True)  # as many skipped as kept: this one is skipped too
    c.timed(s, body, _spin, True)  # collections in most timed calls: counted
    assert s.timed == 2 and s.gc_skipped == 2 and c.fields()["gc_skipped"] == 2


def test_the_heartbeat_threads_time_counts_from_the_loops_first_beat() -> None:
    c = cost.Cost()
    c.beat()
    assert c.fields()["bg_us"] == c.fields()["bg_total_us"]  # no step yet: all of it
    c.t_first_step = time.time()
    assert c.fields()["bg_us"] == 0  # the loop has started, no beat since
    c.beat()
    _spin(0.005)
    c.beat()
    assert 3_000 <= c.fields()["bg_us"] <= c.fields()["bg_total_us"]
