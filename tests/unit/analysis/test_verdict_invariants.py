"""Properties every verdict keeps, checked over hand-built and randomly generated run records (pure):
never OK when a rank ended abnormally (but for the documented teardown abort), culprits kept apart from
the ranks that only wait, a cited divergence that agrees with the ledgers, messages short at any size."""

from __future__ import annotations

import random

from builder import RunBuilder, pending

from ddpdoctor.analysis import diagnose
from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.ending import how_ended
from ddpdoctor.analysis.findings import group_values, rank_list
from ddpdoctor.record.reader import load_run

CFG = Config()
ABORT = "terminate called without an active exception"


def _end(b: RunBuilder, rank: int, how: str, t: float) -> None:
    """One way a rank can end, as the rank side records it."""
    d = b.root / "ranks" / str(rank)
    if how == "ok":
        b.finish(rank, t, seq=5)
    elif how == "teardown":
        b.finish(rank, t, seq=5)
        (b.root / "logs" / "x" / "attempt_0" / str(rank)).mkdir(parents=True, exist_ok=True)
        (b.root / "logs" / "x" / "attempt_0" / str(rank) / "stderr.log").write_text(ABORT + "\n")
    elif how == "exit2":
        b.finish(rank, t, code=2, seq=5)
    elif how == "raised":
        b.finish(rank, t, code=1, seq=5, exception=True)
        (d / "error.json").write_text(
            '{"type": "ValueError", "message": "bad batch", "user_frame": ["/work/train.py", 40, "main"], "frames": []}'
        )
    elif how == "transport":
        b.finish(rank, t, code=1, seq=5, exception=True)
        (d / "error.json").write_text(
            '{"type": "RuntimeError", "message": "[/x/pair.cc:1] Connection closed '
            'by peer [127.0.0.1]:1. This is typically", "frames": []}'
        )
    elif how == "signal":
        (d / "fatal.txt").write_text(
            "Fatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most "
            'recent call first):\n  File "/work/train.py", line 33 in main\n'
        )
    elif how == "sigterm":
        (d / "terminated.txt").write_text(
            'Current thread 0x1 (most recent call first):\n  File "/work/train.py", line 21 in main\n'
        )
    elif how == "killed":
        pass  # no trace at all: SIGKILL


WAYS = ["ok", "ok", "ok", "teardown", "exit2", "raised", "transport", "signal", "sigterm", "killed"]


def _random_run(tmp_path, i: int, rng: random.Random):
    n = rng.choice([1, 2, 2, 3, 4, 8])
    b = RunBuilder(tmp_path / f"r{i}")
    ways = [rng.choice(WAYS) for _ in range(n)]
    for r in range(n):
        b.start(r)
        b.hb(r, 1.0 + r * 0.01, seq=5, where=20)
        _end(b, r, ways[r], 2.0 + rng.random())
    b.add(None, "monitor.jsonl", "exit", 4.0, returncode=0 if set(ways) <= {"ok"} else 1)
    return b, ways


def test_property_never_ok_when_a_rank_ended_abnormally(tmp_path):
    rng = random.Random(8)
    for i in range(150):
        b, ways = _random_run(tmp_path, i, rng)
        record = load_run(str(b.root))
        report = diagnose(record, CFG)
        abnormal = [w for w in ways if w not in ("ok", "teardown")]
        teardown = "teardown" in ways
        # a SIGTERM/SIGKILL that followed a finished rank's teardown abort is that abort's victim
        real = [w for w in abnormal if not (teardown and w in ("sigterm", "killed"))]
        if real:
            assert report.verdict != "ok", (ways, report.findings)
            assert report.exit_code != 0
        if not abnormal:
            assert report.verdict == "ok", (ways, report.findings)
        for f in report.findings:
            assert set(f.culprits) <= set(f.ranks) or not f.ranks, f
        assert all(how_ended(record, r) is None for r, w in enumerate(ways) if w in ("ok", "teardown"))


def test_a_rank_killed_by_a_signal_is_never_ok(tmp_path):
    b = RunBuilder(tmp_path / "run")
    for r in (0, 1):
        b.start(r)
        b.hb(r, 1.0, seq=5)
    b.finish(0, 2.0, seq=5)
    _end(b, 1, "signal", 2.0)
    b.add(None, "monitor.jsonl", "exit", 3.0, returncode=1)
    report = diagnose(load_run(str(b.root)), CFG)
    assert report.verdict == "crash" and report.exit_code == 1
    f = report.findings[0]
    assert f.id == "crash.exception" and f.culprits == (1,) and "Segmentation fault" in f.message
    # faulthandler's line; rank 0 finished normally, so it is no victim
    assert [(l.rank, l.line, l.role) for l in f.locations] == [(1, 33, "raised")]


def test_teardown_abort_and_the_rank_torchrun_then_ended_stay_ok(tmp_path):
    b = RunBuilder(tmp_path / "run")
    for r in (0, 1):
        b.start(r)
        b.hb(r, 1.0, seq=5)
    _end(b, 1, "teardown", 2.0)
    _end(b, 0, "sigterm", 2.1)
    b.add(None, "monitor.jsonl", "exit", 3.0, returncode=1)
    report = diagnose(load_run(str(b.root)), CFG)
    assert report.verdict == "ok" and report.exit_code == 0
    assert [f.id for f in report.findings] == ["teardown.gloo-abort"]


def test_stop_rule_kill_is_not_abnormal(tmp_path):
    b = RunBuilder(tmp_path / "run")
    for r in (0, 1):
        b.start(r)
        b.hb(r, 1.0, seq=5)
        _end(b, r, "sigterm", 2.0)
    b.add(None, "monitor.jsonl", "kill", 1.5, reason="--steps 20 reached")
    b.add(None, "monitor.jsonl", "exit", 3.0, returncode=1)
    assert diagnose(load_run(str(b.root)), CFG).verdict == "ok"


def test_a_node_that_sees_only_its_own_rank_says_so(tmp_path):
    b = RunBuilder(tmp_path / "run")
    b.add(1, "events.jsonl", "start", 0.0, pid=999999, local_rank=0)
    b.add(1, "events.jsonl", "init", 0.1, global_rank=1, world_size=2, backend="gloo")
    b.hb(1, 1.0, seq=5, pending=pending("barrier", 6, 30, 0.5, ()))
    _end(b, 1, "transport", 2.0)
    b.add(None, "monitor.jsonl", "exit", 3.0, returncode=1)
    report = diagnose(load_run(str(b.root)), CFG)
    f = report.findings[0]
    assert report.verdict != "ok" and f.id == "crash.abnormal-exit"
    assert f.culprits == ()  # the culprit is on the node it cannot see
    assert "rank 0 runs on another node" in f.message and "ddpdoctor analyze" in f.hint


def test_uncertain_wait_at_1024_ranks_reads_in_one_short_line(tmp_path):
    b = RunBuilder(tmp_path / "run")
    for r in range(1024):
        b.add(r, "events.jsonl", "start", 0.0, pid=999999, local_rank=r % 8)
        b.add(r, "events.jsonl", "init", 0.1, global_rank=r, world_size=1024, backend="gloo")
        if r == 77:
            b.hb(r, 69.0, seq=5, where=88)
        else:
            b.hb(r, 69.0, seq=6, pending=pending("all_reduce", 6, 40, 3.0))
    b.add(None, "monitor.jsonl", "verdict", 70.0, mode="timeout", reason="rank 0 waited 67 s")
    report = diagnose(load_run(str(b.root)), CFG)
    f = report.findings[0]
    assert f.id == "hang.timeout" and f.culprits == (77,)
    assert f.message.startswith("no progress for 60 s: rank 77: busy at train.py:88; 1023 ranks [0-76,78-1023]")
    assert len(f.message) < 200


def test_rank_lists_are_ranges():
    assert rank_list([5, 0, 1, 2, 3, 9, 7, 8]) == "[0-3,5,7-9]"
    assert rank_list([1, 2]) == "[1,2]"
    assert group_values({0: "a", 1: "b", 2: "b", 3: "b"}) == "rank 0: a; 3 ranks [1-3]: b"
    assert group_values({0: "a", 1: "b", 2: "b"}, first=[1]) == "2 ranks [1,2]: b; rank 0: a"


def test_uneven_batches_hint_fits_a_script_that_already_uses_distributed_sampler(tmp_path):
    def run(sampler: str):
        b = RunBuilder(tmp_path / sampler)
        for r, n in ((0, 6), (1, 4)):
            b.start(r)
            b.add(r, "events.jsonl", "dataloader", 0.5, len=n, site=["/work/train.py", 30, "main"], sampler=sampler)
            b.hb(r, 1.0, seq=8 - r, step=5 - r)
        b.add(None, "monitor.jsonl", "verdict", 3.0, mode="certain", reason="x")
        f = diagnose(load_run(str(b.root)), CFG).findings[0]
        assert f.id == "hang.uneven-batches" and f.culprits == (1,)
        return f.hint

    assert "drop_last=True" in run("DistributedSampler") and "use DistributedSampler" not in run("DistributedSampler")
    assert "use DistributedSampler" in run("SequentialSampler")


def test_epochs_stop_rule_counts_training_passes_not_peeks_or_validation():
    from ddpdoctor.launch.monitor import _epochs

    peek, loop, val = ["/t.py", 54, "f"], ["/t.py", 57, "f"], ["/t.py", 70, "g"]
    events = [{"kind": "dataloader", "site": s} for _ in range(3) for s in (peek, loop, val)]
    assert _epochs(events) == 3
    assert _epochs([{"kind": "start"}]) == 0
