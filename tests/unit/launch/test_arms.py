"""tune's plan: which knob arms run for what the survey run showed, and why the others do not."""

from __future__ import annotations


def test_the_plan_leaves_out_what_does_not_apply():
    from ddpdoctor.launch.arms import KNOBS, SWEEP, plan

    facts = {
        "ddp": {"script": {"bucket_cap_mb": 1, "gradient_as_bucket_view": False, "find_unused_parameters": True}},
        "loader": {"num_workers": 0, "iterable": True, "splits": False},
    }
    arms, skipped = plan(facts, 0.5, 2, "gloo", False, KNOBS, SWEEP)
    labels = [a.label for a in arms]
    assert labels == [
        "bucket_cap_mb=5",
        "bucket_cap_mb=25",
        "bucket_cap_mb=100",
        "gradient_as_bucket_view",
        "fp16 compression hook",
    ]
    assert [a.change for a in arms][1] == "DDP(model, ..., bucket_cap_mb=25)"
    text = "\n".join(skipped)
    assert "static_graph: not applicable" in text and "find_unused_parameters=True" in text
    assert "bf16 compression hook: not applicable on gloo" in text
    assert "does not split itself across workers" in text
    assert next(a for a in arms if "fp16" in a.label).note.startswith("changes results")
    # a map-style dataset that waits on data gets worker arms; one below the bar does not
    facts["loader"] = {"num_workers": 0, "iterable": False, "splits": False}
    assert [a.label for a in plan(facts, 0.5, 2, "gloo", True, ("num_workers", "comm_hook"), SWEEP)[0]] == [
        "num_workers=2",
        "num_workers=4",
    ]
    arms, skipped = plan(facts, 0.05, 2, "gloo", True, ("num_workers", "comm_hook"), SWEEP)
    assert arms == [] and any("registers a comm hook of its own" in s for s in skipped)
    assert any("waits on data 5 %" in s for s in skipped)


def test_the_scaling_report_says_what_was_counted_and_when_a_figure_cannot_be_trusted():
    from ddpdoctor.analysis.profile.scaling import machine_bound, scaling
    from ddpdoctor.analysis.profile.trials import RunFigures
    from ddpdoctor.launch.arms import scaling_lines

    def fig(n: int, step: float) -> RunFigures:
        return RunFigures(n, step, 1.0, 20, {"data": 0.0}, 128 * n, 128, 1.0, 0.0, 2.0)

    figs = [fig(1, 50.0), fig(2, 27.0), fig(4, 60.0)]
    points, counted = scaling(figs)
    lines = scaling_lines("train.py", points, counted, figs, "1", machine_bound([1, 2, 4], 1, 2, 0))
    text = "\n".join(lines)
    assert "OMP_NUM_THREADS=1 in every run" in lines[0]
    assert "micro-batches included" in text and "128 per rank per step at 1 rank" in text
    assert "2 ranks: 3.70x of 2x (185 %)" in text and "4 ranks: 3.33x of 4x (83 %)" in text
    assert "note: above linear" in text and "2 CPU cores for up to 4 ranks x 1 thread" in text
    points, counted = scaling([fig(1, 50.0), fig(2, 55.0)])
    lines = scaling_lines("train.py", points, counted, [fig(1, 50.0), fig(2, 55.0)], "1", None)
    assert not any(line.startswith("note:") for line in lines)
