"""How each rank ended and the invariant that an abnormal end is never OK (analysis/ending.py): a rank
that finished, or one the monitor stopped on purpose, ended normally; an exception, a non-zero exit, a
fatal signal or a kill is named; crash.abnormal-exit blames the rank that failed on its own, not the one
that lost a peer; a node's partial view is said."""

from __future__ import annotations

from ddpdoctor.analysis.ending import how_ended, partial_view, stopped_on_purpose, unexplained
from ddpdoctor.analysis.findings import Finding
from ddpdoctor.record.reader import RankRecord, RunRecord

INIT = {"kind": "init", "world_size": 2}
EXIT = {"kind": "exit", "t": 9.0, "returncode": 1}


def _record(ranks: dict[int, RankRecord], monitor: list[dict] | None = None) -> RunRecord:
    return RunRecord("/run", {"command": "hang"}, ranks, monitor or [])


def _rank(r: int, *events: dict, **kw) -> RankRecord:
    return RankRecord(r, events=[INIT, *events], **kw)


def test_a_finished_rank_or_a_live_one_ended_normally() -> None:
    rec = _record({0: _rank(0, {"kind": "finish", "code": 0}), 1: _rank(1)})
    assert how_ended(rec, 0) is None and how_ended(rec, 1) is None  # rank 1: still running (no exit yet)
    assert unexplained(rec, []) == []


def test_each_abnormal_end_is_named() -> None:
    err = {"type": "RuntimeError", "message": "[/__w/gloo/pair.cc:553] Connection closed by peer. More text\nline 2"}
    rec = _record(
        {
            0: _rank(0, error={"type": "ValueError", "message": "bad batch"}),
            1: _rank(1, error=err),
            2: _rank(2, {"kind": "finish", "code": 3}),
            3: _rank(3, fatal="Fatal Python error: Segmentation fault\n..."),
            4: _rank(4, terminated="Thread 0x1 (most recent call first):"),
            5: _rank(5),
        },
        [EXIT],
    )
    assert how_ended(rec, 0) == "raised ValueError: bad batch"
    assert how_ended(rec, 1) == "failed with a transport error RuntimeError: Connection closed by peer"
    assert how_ended(rec, 2) == "exited with code 3"
    assert how_ended(rec, 3) == "died of a fatal signal (Fatal Python error: Segmentation fault)"
    assert how_ended(rec, 4) == "was ended (SIGTERM) before it finished"
    assert how_ended(rec, 5) == "ended without finishing (killed)"


def test_a_run_stopped_by_the_users_stop_rule_is_not_abnormal() -> None:
    rec = _record(
        {0: _rank(0, terminated="Thread ..."), 1: _rank(1)}, [{"kind": "kill", "reason": "--steps 100 reached"}, EXIT]
    )
    assert stopped_on_purpose(rec) and how_ended(rec, 1) is None and unexplained(rec, []) == []


def test_the_rank_that_failed_on_its_own_is_the_culprit_and_the_peer_a_victim() -> None:
    rec = _record(
        {
            0: _rank(0, error={"type": "ValueError", "message": "bad", "user_frame": ["/w/train.py", 40, "main"]}),
            1: _rank(1, error={"type": "RuntimeError", "message": "Connection reset by peer"},
                     last_hb={"where": ["/w/train.py", 55, "main"]}),
        },
        [EXIT],
    )  # fmt: skip
    (f,) = unexplained(rec, [])
    assert f.id == "crash.abnormal-exit" and f.culprits == (0,) and f.ranks == (0, 1)
    assert f.message.startswith("the run ended abnormally: rank 0: raised ValueError: bad; rank 1: failed with")
    assert [(l.rank, l.line, l.role) for l in f.locations] == [(0, 40, "ended here"), (1, 55, "victim")]
    assert unexplained(rec, [Finding("crash.exception", "error", "explained")]) == []


def test_a_partial_view_names_the_ranks_this_node_cannot_see() -> None:
    rec = _record({0: RankRecord(0, events=[{"kind": "init", "world_size": 4}])})
    (f,) = partial_view(rec, [])
    assert f.id == "multinode.partial-view" and f.evidence["unseen_ranks"] == [1, 2, 3]
    assert f.message == "this run saw rank 0 of 4; 3 ranks [1-3] run on other nodes and are not visible here"
    assert partial_view(_record({0: _rank(0), 1: _rank(1)}), []) == []


_TORCHRUN_TABLE = """[1]:
  time      : 2026-12-03_18:11:18
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 5578)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 5578
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-03_18:11:18
  host      : localhost
  rank      : 2 (local_rank: 2)
  exitcode  : -9 (pid: 5580)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 5580
[1]:
  rank      : 3 (local_rank: 1)
  exitcode  : 3 (pid: 5581)
"""


def test_torchruns_failure_table_names_each_ranks_end(tmp_path) -> None:
    from ddpdoctor.analysis.ending import torchrun_exits

    (tmp_path / "torchrun.log").write_text("noise\n" * 50 + _TORCHRUN_TABLE)
    assert torchrun_exits(str(tmp_path)) == {0: "killed by SIGTERM", 2: "killed by SIGKILL", 3: "exit code 3"}
    assert torchrun_exits(str(tmp_path / "absent")) == {}
