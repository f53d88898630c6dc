"""Outstanding asynchronous Works (rank/works.py): nothing pending reads as None; the oldest incomplete
collective is reported with the counts of pending ones and of sends; completed or failing Works are
dropped and released; past the limit new ones are counted as untracked."""

from __future__ import annotations

from typing import Any

from ddpdoctor.rank import works
from ddpdoctor.rank.works import WorkTracker


class FakeWork:
    def __init__(self, done: bool = False, broken: bool = False) -> None:
        self.done, self.broken = done, broken

    def is_completed(self) -> bool:
        if self.broken:
            raise RuntimeError("NCCL communicator was aborted")
        return self.done


def _add(t: WorkTracker, w: Any, op: str, seq: int, peer: int | None = None) -> None:
    t.add(w, op, "0", seq, [[4]], ["float32"], ["/w/train.py", 10 + seq, "main"], 100.0 + seq, peer)


def test_no_works_or_all_completed_is_nothing_pending() -> None:
    t = WorkTracker()
    assert t.poll() is None
    _add(t, FakeWork(done=True), "all_reduce", 1)
    assert t.poll() is None and t.completed == 1 and len(t.q) == 0


def test_the_oldest_incomplete_collective_is_reported_with_the_counts() -> None:
    t = WorkTracker()
    first, second, third = FakeWork(done=True), FakeWork(), FakeWork()
    _add(t, first, "all_reduce", 1)
    _add(t, second, "isend", 2, peer=1)
    _add(t, third, "all_reduce", 3)
    got = t.poll()
    assert got == {
        "op": "isend",
        "group": "0",
        "seq": 2,
        "shapes": [[4]],
        "dtypes": ["float32"],
        "site": ["/w/train.py", 12, "main"],
        "since": 102.0,
        "n": 2,
        "sends": 1,
        "peer": 1,
    }
    second.done = True
    got = t.poll()
    assert got["op"] == "all_reduce" and got["seq"] == 3 and got["n"] == 1 and "peer" not in got
    assert len(t.q) == 1 and t.completed == 2  # completed Works at the front are released


def test_a_work_that_cannot_say_counts_as_completed() -> None:
    t = WorkTracker()
    _add(t, FakeWork(broken=True), "all_reduce", 1)
    assert t.poll() is None and t.completed == 1


def test_past_the_limit_works_are_counted_untracked(monkeypatch) -> None:
    monkeypatch.setattr(works, "LIMIT", 2)
    t = WorkTracker()
    for s in range(5):
        _add(t, FakeWork(), "all_reduce", s)
    assert len(t.q) == 2 and t.untracked == 3 and t.poll()["n"] == 2
