"""The terminal report (render/text.py): the verdict line with its exit code, each finding with its mark,
one line per place with the ranks there grouped, the fix, the ranks' states, notes and the run directory."""

from __future__ import annotations

from ddpdoctor.analysis.findings import Finding, Location, RankLine, Report
from ddpdoctor.render.text import render


def test_a_healthy_run_says_ok_and_no_findings() -> None:
    out = render(Report("check", "ok", 0, "/tmp/run", ranks=(RankLine(0, "finished", "finished (exit 0)"),)))
    assert out == (
        "ddpdoctor check: OK (exit code 0)\n  no findings\n"
        "  ddpdoctor's cost: not measured (no rank recorded its account)\n  run directory: /tmp/run\n"
    )


def test_a_hang_shows_the_finding_its_places_fix_and_rank_states() -> None:
    f = Finding(
        "hang.rank-conditional-collective",
        "error",
        "rank 0 called all_reduce that the others never called",
        "Call it on every rank.",
        (0, 1, 2),
        (
            Location(0, "/w/train.py", 22, "main", "diverged"),
            Location(1, "/w/train.py", 30, "main", "waiting"),
            Location(2, "/w/train.py", 30, "main", "waiting"),
        ),
        culprits=(0,),
    )
    ranks = (
        RankLine(0, "waiting", "waiting in all_reduce", Location(0, "/w/train.py", 22)),
        RankLine(1, "waiting", "waiting in barrier", Location(1, "/w/train.py", 30)),
        RankLine(2, "waiting", "waiting in barrier", Location(2, "/w/train.py", 30)),
    )
    out = render(Report("hang", "hang", 3, "/tmp/run", (f,), ranks, notes=("killed after 60 s",)))
    assert out.splitlines() == [
        "ddpdoctor hang: HANG (exit code 3)",
        "  [ERROR] hang.rank-conditional-collective: rank 0 called all_reduce that the others never called",
        "      rank 0: /w/train.py:22 in main (diverged)",
        "      2 ranks [1,2]: /w/train.py:30 in main (waiting)",
        "      fix: Call it on every rank.",
        "  ranks:",
        "    rank 0: waiting in all_reduce at /w/train.py:22",
        "    2 ranks [1,2]: waiting in barrier at /w/train.py:30",
        "  note: killed after 60 s",
        "  ddpdoctor's cost: not measured (no rank recorded its account)",
        "  run directory: /tmp/run",
    ]


def test_warnings_and_notes_have_their_marks_and_ok_is_not_said_for_a_partial_view() -> None:
    found = (
        Finding("perf.grad-accum-no-sync", "warning", "w"),
        Finding("multinode.partial-view", "note", "rank 1 runs on another node"),
    )
    out = render(Report("check", "ok", 0, "/r", found))
    assert out.startswith("ddpdoctor check: OK ON THIS NODE (exit code 0)\n")
    assert "  [WARN] perf.grad-accum-no-sync: w\n" in out and "  [note] multinode.partial-view: " in out
    assert "no findings" not in out


def test_the_cost_line_states_the_training_thread_background_and_monitor_per_step() -> None:
    cost = {
        "train_us_per_step": 3.14,
        "train_pct": 0.185,
        "step_ms": 1.7,
        "background_us_per_step": 12.0,
        "background_pct": 0.71,
        "monitor_us_per_step": 25.0,
        "monitor_pct": 1.47,
        "ranks": {},
    }
    out = render(Report("hang", "ok", 0, "/r", cost=cost))
    assert (
        "  ddpdoctor's cost: 3.1 µs/step on the training thread (0.18 % of a 1.70 ms step), background 12.0 "
        "µs/step (0.7 %), monitor 25.0 µs/step (1.5 %)\n"
    ) in out
    # a post-mortem of another job's files ran nothing in its ranks: no cost line
    assert "cost" not in render(Report("analyze", "ok", 0, "/r"))
