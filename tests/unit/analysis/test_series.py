"""Theil-Sen slopes and the growth summary of a series (analysis/series.py): robust to an outlier, the
warm-up left out, the later half judged by steps, and too few points give no verdict."""

from __future__ import annotations

import pytest

from ddpdoctor.analysis.series import growth, theil_sen


def test_theil_sen_is_the_slope_of_a_line_and_ignores_one_outlier() -> None:
    xs = [float(i) for i in range(10)]
    assert theil_sen(xs, [3.0 * x + 1 for x in xs]) == pytest.approx(3.0)
    ys = [3.0 * x + 1 for x in xs]
    ys[5] = 1e6
    assert theil_sen(xs, ys) == pytest.approx(3.0)


def test_theil_sen_of_a_single_x_is_zero() -> None:
    assert theil_sen([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) == 0.0


def test_theil_sen_thins_long_series_and_keeps_the_slope() -> None:
    xs = [float(i) for i in range(1000)]
    assert theil_sen(xs, [0.5 * x for x in xs]) == pytest.approx(0.5)


def test_too_few_points_give_no_growth() -> None:
    assert growth([(1.0, 1.0), (2.0, 2.0), (3.0, 3.0)]) is None


def test_a_steady_leak_after_warm_up() -> None:
    # warm-up: a big jump over the first steps, then 1 KiB a step
    pts = [(float(s), (5000.0 if s < 4 else 10_000.0) + 1024.0 * s) for s in range(20)]
    g = growth(pts)
    assert g is not None
    assert g["slope"] == pytest.approx(1024.0) and g["late_slope"] == pytest.approx(1024.0)
    assert g["first_step"] == 4.0 and g["last_step"] == 19.0 and g["steps"] == 15.0
    assert g["last"] == 10_000.0 + 1024.0 * 19 and g["up_fraction"] == 1.0
    assert g["above_prior"] > 0


def test_a_flat_series_with_a_dip_does_not_grow() -> None:
    pts = [(float(s), 100.0) for s in range(20)]
    pts[12] = (12.0, 50.0)
    g = growth(pts)
    assert g is not None and g["late_slope"] == 0.0 and g["above_prior"] == 0.0 and g["up_fraction"] < 0.5
