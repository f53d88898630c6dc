"""profile --scaling's pure figures: efficiency against the smallest run and the lost part split."""

from __future__ import annotations

from ddpdoctor.analysis.profile import trials


def test_scaling_splits_the_lost_part():
    from ddpdoctor.analysis.profile.scaling import machine_bound, scaling

    def fig(n: int, step: float, exposed: float, wait: float, data: float) -> trials.RunFigures:
        return trials.RunFigures(n, step, 1.0, 20, {"data": data}, 32 * n, 32, exposed, wait, exposed + 2)

    points, counted = scaling([fig(2, 60.0, 12.0, 2.0, 6.0), fig(1, 40.0, 0.5, 0.0, 5.0)])
    assert counted and [p.world_size for p in points] == [1, 2]
    p = points[1]
    assert abs(p.speedup - (64 / 60) / (32 / 40)) < 1e-9 and p.ideal == 2
    assert p.line() == f"2 ranks: {p.speedup:.2f}x of 2x ({100 * p.efficiency:.0f} %)"
    assert abs(p.lost_ms - 20.0) < 1e-9
    assert abs(p.lost["exposed communication"] - 9.5) < 1e-9  # (12 - 2) - 0.5
    assert abs(p.lost["waiting for a slower rank"] - 2.0) < 1e-9
    assert abs(p.lost["data wait"] - 1.0) < 1e-9
    assert abs(p.lost["rest"] - 7.5) < 1e-9 and abs(sum(p.lost.values()) - p.lost_ms) < 1e-9
    assert "bounded by the machine" in (machine_bound([1, 2, 4], 1, 2, 0) or "")
    assert machine_bound([1, 2], 1, 2, 0) is None
