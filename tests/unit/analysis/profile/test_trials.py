"""The pure judgement of ddpdoctor tune's arms: rotation, the A/A spread rule, the pick of a sweep."""

from __future__ import annotations

from ddpdoctor.analysis.profile.trials import FAILED, FASTER, NOISE, SLOWER, aa_spread, best, judge, rotated


def test_rotation_puts_every_arm_first_once_and_keeps_the_cycle():
    arms = ["A", "A'", "x", "y"]
    orders = [rotated(arms, r) for r in range(4)]
    assert [o[0] for o in orders] == arms  # each arm leads one repetition
    for o in orders:  # the same cycle: every arm keeps its neighbours, so no pair is always adjacent in one order
        i = o.index("A")
        assert o[i:] + o[:i] == arms
    assert rotated(arms, 5) == orders[1] and rotated([], 3) == []


def test_aa_spread_is_the_largest_relative_difference_of_the_baselines():
    assert abs(aa_spread([100.0, 100.0], [104.0, 99.0]) - 4 / 102) < 1e-12


def test_a_gain_counts_only_when_every_rep_beats_the_aa_spread():
    a, b = [100.0, 102.0, 98.0], [103.0, 100.0, 99.0]  # spread ~3 %
    assert judge(a, b, [70.0, 71.0, 69.0]).verdict == FASTER
    # one repetition inside the spread: the gain does not count, however large the others
    assert judge(a, b, [70.0, 100.0, 69.0]).verdict == NOISE
    assert judge(a, b, [130.0, 131.0, 129.0]).verdict == SLOWER
    assert judge(a, b, [101.0, 100.0, 99.0]).verdict == NOISE
    assert judge(a, b, [70.0, None, 69.0]).verdict == FAILED


def test_a_noisy_machine_widens_the_bar():
    # the same arm timings count on a quiet machine and not on a noisy one: the bar is the A/A spread measured
    arm = [90.0, 91.0, 89.0]
    assert judge([100.0, 100.0, 100.0], [101.0, 99.0, 100.0], arm).verdict == FASTER
    assert judge([100.0, 100.0, 100.0], [120.0, 99.0, 100.0], arm).verdict == NOISE


def test_one_repetition_never_counts():
    # recorded on this 2-core machine (gloo, 48 Linear(256) layers, 2 ranks): bucket_cap_mb=1 twice (A/A)
    # and bucket_cap_mb=25 once; one repetition is not enough to call anything
    assert judge([35.41], [50.50], [58.05]).verdict == NOISE


def test_the_sweep_recommends_the_largest_gain_among_the_arms_that_count():
    a, b = [50.0, 51.0, 49.0], [50.5, 50.0, 50.0]
    judged = {
        "bucket_cap_mb=5": judge(a, b, [45.0, 51.0, 44.0]),  # one repetition within noise
        "bucket_cap_mb=25": judge(a, b, [40.0, 41.0, 39.0]),
        "bucket_cap_mb=100": judge(a, b, [42.0, 43.0, 41.0]),
    }
    assert judged["bucket_cap_mb=5"].verdict == NOISE
    assert judged["bucket_cap_mb=25"].verdict == FASTER and judged["bucket_cap_mb=100"].verdict == FASTER
    assert best(judged) == "bucket_cap_mb=25"
    assert best({k: v for k, v in judged.items() if k.endswith("=5")}) is None
