"""profile.exposed-comm over hand-built timelines: DDP's timers against the typical step."""

from __future__ import annotations

from builder import RunBuilder

from ddpdoctor.analysis.profile import exposed, trials
from ddpdoctor.record.reader import load_run


def _run(tmp_path, timers: dict[int, dict], step_ms: float = 30.0, buckets: tuple = (262400, 2**20)):
    b = RunBuilder(tmp_path / "run", command="profile")
    for rank, ddp in timers.items():
        b.start(rank)
        t = 1_000_000_000
        for i in range(20):
            d = int(step_ms * 1e6)
            b.add(rank, "timeline.jsonl", "range", 1.0, name="backward", cat="compute", tid=7, t0=t, t1=t + d // 2)
            b.add(rank, "timeline.jsonl", "range", 1.0, name="step", cat=None, tid=7, t0=t, t1=t + d, payload=i)
            t += d
        b.add(
            rank,
            "timeline.jsonl",
            "profile_info",
            2.0,
            steps=20,
            buckets=list(buckets),
            bucket_cap_mb=25.0,
            ddp=ddp,
            step_samples={"128": 20},
        )
    return load_run(str(b.root))


def test_exposed_allreduce_over_a_quarter_of_the_step_is_named_with_its_buckets(tmp_path):
    t = {"backward_ms": 10.0, "comm_ms": 12.0, "overlap_ms": 2.0}
    [f] = exposed.detect(_run(tmp_path, {0: t, 1: t}))
    assert f.id == "profile.exposed-comm" and f.culprits == (0, 1)
    assert "10.0 ms per step after the backward compute ended" in f.message and "33 % of the 30.0 ms" in f.message
    assert "2 buckets (256 KiB, 1.0 MiB; bucket_cap_mb 25)" in f.message and "ddpdoctor tune" in f.hint


def test_one_small_bucket_is_latency_no_knob_changes(tmp_path):
    t = {"backward_ms": 1.0, "comm_ms": 9.0, "overlap_ms": 0.5}
    assert exposed.exposed_by_rank(_run(tmp_path, {0: t, 1: t}, 10.0, (2304,))) == {0: 8.5, 1: 8.5}
    assert exposed.detect(_run(tmp_path / "b", {0: t, 1: t}, 10.0, (2304,))) == []


def test_a_wait_for_a_slower_rank_is_no_exposed_communication(tmp_path):
    # rank 0 computes 10 ms longer; rank 1 waits for it inside its all-reduce: a straggler, not the network
    rec = _run(
        tmp_path,
        {
            0: {"backward_ms": 20.0, "comm_ms": 3.0, "overlap_ms": 1.0},
            1: {"backward_ms": 10.0, "comm_ms": 13.0, "overlap_ms": 1.0},
        },
    )
    assert exposed.exposed_by_rank(rec) == {0: 2.0, 1: 2.0}
    assert exposed.detect(rec) == []
    f = trials.figures_of(rec)
    assert f is not None and f.samples_per_step == 256 and f.per_rank_samples == 128 and abs(f.step_ms - 30.0) < 1e-6
