"""crash.detect on hand-built runs: the rank that raised first is the culprit at its user line, the
others waiting on it (or lost to a transport error) are its victims, a later raiser is named as later."""

from __future__ import annotations

import json

from builder import RunBuilder, pending

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.hang import crash
from ddpdoctor.record.reader import load_run

CFG = Config(timeout=10.0)
LOST = "[/x/pair.cc:1] Connection closed by peer [127.0.0.1]:1"


def _error(b: RunBuilder, rank: int, etype: str, message: str, line: int | None) -> None:
    frame = ["/work/train.py", line, "main"] if line else None
    (b.root / "ranks" / str(rank) / "error.json").write_text(
        json.dumps({"type": etype, "message": message, "frames": [frame] if frame else [], "user_frame": frame})
    )


def _detect(b: RunBuilder):
    return crash.detect(load_run(str(b.root)), CFG)


def test_a_healthy_run_has_no_crash_finding(tmp_path):
    b = RunBuilder(tmp_path / "run").start(0).start(1).finish(0, 3.0, seq=4).finish(1, 3.0, seq=4)
    assert _detect(b) == []


def test_a_transport_error_alone_is_no_crash(tmp_path):
    b = RunBuilder(tmp_path / "run").start(0).start(1).finish(0, 3.0, code=1, exception=True)
    _error(b, 0, "RuntimeError", LOST, 12)
    assert _detect(b) == []


def test_the_raising_rank_is_the_culprit_at_its_line_and_the_waiting_rank_its_victim(tmp_path):
    b = RunBuilder(tmp_path / "run").start(0).start(1)
    b.hb(0, 2.0, 5, pending("all_reduce", 5, 10, 1.5))
    b.finish(1, 2.5, code=1, exception=True)
    _error(b, 1, "ValueError", "loss is nan\nmore detail", 20)
    (f,) = _detect(b)
    assert f.id == "crash.exception" and f.culprits == (1,)
    assert f.message.startswith("rank 1 raised ValueError: loss is nan") and "rank 0 was waiting on it" in f.message
    assert "more detail" not in f.message
    assert {(l.rank, l.line, l.role) for l in f.locations} == {(1, 20, "raised"), (0, 10, "victim")}
    assert f.evidence["type"] == "ValueError"


def test_the_first_rank_to_finish_is_the_root_cause_and_the_later_raiser_is_named(tmp_path):
    b = RunBuilder(tmp_path / "run").start(0).start(1)
    b.finish(0, 4.0, code=1, exception=True).finish(1, 2.0, code=1, exception=True)
    _error(b, 0, "KeyError", "'b'", 30)
    _error(b, 1, "ValueError", "bad", 20)
    (f,) = _detect(b)
    assert f.culprits == (1,) and "rank 0 raised too, later" in f.message


def test_a_victim_lost_to_gloo_is_located_at_its_own_user_frame(tmp_path):
    b = RunBuilder(tmp_path / "run").start(0).start(1)
    b.finish(0, 3.0, code=1, exception=True).finish(1, 2.0, code=1, exception=True)
    _error(b, 0, "RuntimeError", LOST, 11)
    _error(b, 1, "ZeroDivisionError", "division by zero", 21)
    (f,) = _detect(b)
    assert f.culprits == (1,)
    assert (0, 11, "victim") in {(l.rank, l.line, l.role) for l in f.locations}


def test_an_exception_in_a_dataloader_worker_names_the_worker_and_its_line(tmp_path):
    b = RunBuilder(tmp_path / "run").start(0).start(1).finish(0, 2.0, code=1, exception=True)
    msg = (
        "Caught IndexError in DataLoader worker process 3.\nOriginal Traceback (most recent call last):\n"
        '  File "/work/train.py", line 44, in __getitem__\n    return self.x[i]\n'
        "IndexError: index 9 is out of bounds"
    )
    _error(b, 0, "IndexError", msg, 60)
    (f,) = _detect(b)
    assert f.message.startswith("rank 0: IndexError: index 9 is out of bounds (in DataLoader worker 3)")
    assert (0, 44, "raised in DataLoader worker") in {(l.rank, l.line, l.role) for l in f.locations}
    assert f.evidence["dataloader_worker"] == 3 and "DataLoader worker" in f.hint
