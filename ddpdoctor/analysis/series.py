"""Robust growth of a series (memory per step): Theil-Sen slopes after a warm-up, over the whole run and
its later half. Pure."""

from __future__ import annotations

from statistics import median

MIN_SAMPLES = 4


def theil_sen(xs: list[float], ys: list[float]) -> float:
    """The Theil-Sen slope of (x, y) points: the median of the pairwise slopes (robust to outliers)."""
    pts = list(zip(xs, ys))
    if len(pts) > 150:  # O(n^2): thin long series evenly
        step = len(pts) / 150
        pts = [pts[int(i * step)] for i in range(150)]
    slopes = [(y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(pts) for x2, y2 in pts[i + 1 :] if x2 != x1]
    return median(slopes) if slopes else 0.0


def growth(points: list[tuple[float, float]]) -> dict[str, float] | None:
    """Slopes per step after warm-up: overall, and over the later half (the part that decides)."""
    if len(points) < MIN_SAMPLES:
        return None
    warm = max(3, len(points) // 5) if len(points) >= 8 else 1
    pts = points[warm:]
    if len(pts) < 3:
        return None
    # the later half by steps, not by points: censuses come denser early in a run (steps 1, 2, 4, 8, ...)
    # and a series whose points all lie before the run's second half cannot say it still grows there
    mid = (pts[0][0] + pts[-1][0]) / 2
    half = [p for p in pts if p[0] >= mid] if len(pts) >= 6 else pts
    if len(half) < 3:
        return None
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    hx, hy = [p[0] for p in half], [p[1] for p in half]
    ups = sum(1 for a, b in zip(hy, hy[1:]) if b > a)
    # a leak keeps setting new highs; a level that only wobbles (a dip, then back) does not
    prior = [p[1] for p in pts if p[0] < hx[0]]
    above = ys[-1] - max(prior) if prior else ys[-1] - ys[0]
    # the flat end: the run's last points all at the last value (a cache that filled and stays full). With
    # few points the "later half" is the whole series, and a rise dense in censuses (steps 1, 2, 4, ... 32)
    # outweighs a plateau seen twice: the flat end's share of the steps says the growth has stopped
    k = len(ys) - 1
    while k > 0 and ys[k - 1] == ys[-1]:
        k -= 1
    flat = (xs[-1] - xs[k]) / (xs[-1] - xs[0]) if xs[-1] > xs[0] else 0.0
    return {
        "slope": theil_sen(xs, ys),
        "late_slope": theil_sen(hx, hy),
        "total": ys[-1] - ys[0],
        "above_prior": above,
        "late_total": hy[-1] - hy[0],
        "up_fraction": ups / max(1, len(hy) - 1),
        "steps": xs[-1] - xs[0],
        "last": ys[-1],
        "first_step": xs[0],
        "last_step": xs[-1],
        "flat_tail": flat,
    }
