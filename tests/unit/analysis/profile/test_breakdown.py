"""The profile findings from step breakdowns (analysis/profile/breakdown.py): equal ranks give only the
summary; a rank slow in forward is the straggler with its line and who waits for it; a DataLoader taking
half the step is profile.dataloader-bound; low NVML utilisation is profile.low-gpu-util."""

from __future__ import annotations

import timelines

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.profile.breakdown import detect
from ddpdoctor.record.reader import RankRecord, RunRecord

FWD_LINE = ("forward", "/w/train.py", 40, "main", 20, "out = model(x)")
BWD_LINE = ("backward", "/w/train.py", 42, "main", 20, "loss.backward()")


def _record(timelines_by_rank: dict[int, list[dict]]) -> RunRecord:
    ranks = {r: RankRecord(r, timeline=tl) for r, tl in timelines_by_rank.items()}
    return RunRecord("/run", {"command": "profile"}, ranks, [])


def _ids(found) -> list[str]:
    return [f.id for f in found]


def test_no_timeline_gives_nothing() -> None:
    assert detect(_record({0: [], 1: []}), Config()) == []


def test_equal_ranks_give_only_the_summary_with_their_breakdown() -> None:
    tl = timelines.steps(10) + [timelines.info(steps=10, forwards=20, buckets=[25 * 2**20, 512 * 1024], amp=True)]
    (f,) = detect(_record({0: tl, 1: tl}), Config())
    assert f.id == "profile.summary" and f.severity == "note"
    assert f.message.startswith("typical steady step (")
    assert (
        "2 ranks [0,1]: step 40.0 ms = data 2.0 + forward 10.0 + backward+comm 20.0 + optimizer 5.0 + other 3.0. "
        in (f.message)
    )
    assert (
        "DDP buckets: 2 (25.00 MiB, 512.0 KiB; bucket_cap_mb 0); AMP on; forwards per optimizer step 2.0" in f.message
    )
    assert f.evidence["accumulation"] == 2.0


def test_a_rank_slow_in_forward_is_the_straggler_and_the_others_wait_in_backward() -> None:
    fast = timelines.steps(10, backward=50) + [timelines.samples([FWD_LINE, BWD_LINE])]
    slow = timelines.steps(10, forward=40, rank=2) + [timelines.samples([FWD_LINE, BWD_LINE], rank=2)]
    found = detect(_record({0: fast, 1: fast, 2: slow}), Config())
    assert _ids(found) == ["profile.straggler", "profile.summary"]
    f = found[0]
    assert f.culprits == (2,) and f.severity == "warning"
    assert f.message == (
        "rank 2 is 30 ms/step slower than the median in forward, at train.py:40 (`out = model(x)`, ~40 ms/step); "
        "2 ranks [0,1] wait for it in backward (DDP's gradient all-reduce) at train.py:42 (`loss.backward()`), "
        "+30 ms/step"
    )
    assert [(l.rank, l.line, l.role) for l in f.locations] == [(0, 42, "waiting"), (1, 42, "waiting"), (2, 40, "slow")]
    assert f.evidence["excess_ms"] == 30.0 and f.evidence["phase"] == "forward"


def test_a_difference_below_the_threshold_is_noise() -> None:
    found = detect(_record({0: timelines.steps(10), 1: timelines.steps(10, forward=13)}), Config())
    assert _ids(found) == ["profile.summary"]


def test_half_the_step_waiting_for_data_is_dataloader_bound() -> None:
    tl = timelines.steps(10, data=40)
    loop = {"kind": "dataloader", "site": ["/w/train.py", 33, "main"]}
    rec = _record({0: tl, 1: tl})
    for r in (0, 1):
        rec.ranks[r].events.append(loop)
    found = detect(rec, Config())
    assert _ids(found) == ["profile.dataloader-bound", "profile.summary"]
    f = found[0]
    assert f.culprits == (0, 1)
    assert f.message == (
        "2 ranks [0,1] spend 51% of each step waiting for the DataLoader, at the loop train.py:33 (the workers "
        "do not keep up)"
    )
    assert {(l.rank, l.line, l.role) for l in f.locations} == {(0, 33, "slow"), (1, 33, "slow")}


def test_low_gpu_utilisation_is_named_per_rank() -> None:
    def gpu(util: int) -> list[dict]:
        return [{"kind": "gpu", "util": util, "t": float(i)} for i in range(5)]

    found = detect(_record({0: timelines.steps(10) + gpu(95), 1: timelines.steps(10) + gpu(42)}), Config())
    f = next(f for f in found if f.id == "profile.low-gpu-util")
    assert f.culprits == (1,) and f.message == "GPU utilisation below 90% (NVML): rank 1 ~40%"
