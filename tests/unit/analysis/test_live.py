"""analysis.live: the verdict while a run goes on (a certain deadlock, a timeout, a peer's exception across
nodes, or nothing yet) and the one status line the monitor prints; on hand-built run directories
(tests/builder.py) and, for the wording, hand-made rank states. Pure. (The deadlock proof's main cases:
tests/unit/analysis/test_diagnose.py.)"""

from __future__ import annotations

import json

from builder import RunBuilder, pending

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Location
from ddpdoctor.analysis.live import (
    anyone_waiting,
    certain_deadlock,
    crash_verdict,
    live_verdict,
    op_key,
    status_line,
    verdict_near,
    waits_text,
)
from ddpdoctor.analysis.state import RankState, all_states
from ddpdoctor.record.reader import load_run

CFG = Config(timeout=10.0)
AT = Location(0, "/work/train.py", 20, "main")


def test_op_key_compares_shapes_only_where_they_must_agree():
    a = pending("all_reduce", 5, 20, 2.0, ((4,),))
    assert op_key(a) == op_key(dict(a, seq=9, site=["/x.py", 1, "f"]))  # position and site are not the call
    assert op_key(a) != op_key(pending("all_reduce", 5, 20, 2.0, ((5,),)))
    assert op_key(a) != op_key(dict(a, dtypes=["float16"]))
    assert op_key(pending("barrier", 5, 20, 2.0, ((1,),))) == op_key(pending("barrier", 5, 30, 2.0, ()))


def test_waits_text_for_a_collective_and_for_a_sync_point():
    p = pending("all_reduce", 38, 74, 2.0)
    s = RankState(0, "waiting", since=2.0, pending=p, where=Location(0, "/work/train.py", 74, "main"))
    assert waits_text(s, 5.1) == "rank 0 waits 3.1 s in all_reduce(4)"
    b = RankState(0, "waiting", since=2.0, pending=p, where=s.where, blocked=Location(0, "/work/train.py", 57, "main"))
    assert waits_text(b, 5.1) == (
        "rank 0 is blocked 3.1 s at train.py:57 waiting for all_reduce(4) #38 issued at train.py:74"
    )


def test_an_exited_peer_makes_the_wait_certain(tmp_path):
    b = RunBuilder(tmp_path / "run").start(0).start(1)
    b.coll(0, 1, 20).coll(1, 1, 20).finish(1, 1.5, seq=1)
    p = pending("all_reduce", 2, 20, 2.0)
    b.hb(0, 2.1, 2, p).hb(0, 4.0, 2, p)
    rec = load_run(str(b.root))
    assert certain_deadlock(rec, all_states(rec, 2.5, CFG), CFG, 2.5) is None  # not settled yet
    reason = certain_deadlock(rec, all_states(rec, 4.0, CFG), CFG, 4.0)
    assert reason == "rank 0 waits 2.0 s in all_reduce(4); rank 1 has exited"
    assert live_verdict(rec, CFG, 4.0) == ("certain", reason)


def test_every_rank_waiting_to_receive_is_certain(tmp_path):
    b = RunBuilder(tmp_path / "run").start(0).start(1)
    for r in (0, 1):
        p = dict(pending("recv", 1, 40 + r, 2.0, ()), peer=1 - r)
        b.hb(r, 2.1, 1, p).hb(r, 4.0, 1, p)
    rec = load_run(str(b.root))
    kind, reason = live_verdict(rec, CFG, 4.0)
    assert kind == "certain" and reason.endswith("every rank waits to receive and none sends")
    assert "rank 0 waits 2.0 s in recv from rank 1" in reason and "rank 1 waits 2.0 s in recv from rank 0" in reason


def _states(*states: RankState) -> dict[int, RankState]:
    return {s.rank: s for s in states}


def test_no_progress_anywhere_is_a_timeout_though_nobody_is_in_a_collective(tmp_path):
    rec = load_run(str(RunBuilder(tmp_path / "run").start(0).start(1).root))
    busy = _states(RankState(0, "busy", where=AT, stalled_for=12.0), RankState(1, "busy", where=AT, stalled_for=11.0))
    assert live_verdict(rec, CFG, 20.0, busy) == (
        "timeout",
        "no rank made progress (no step, no collective, no CPU time) for 11 s (--timeout 10)",
    )
    one_moves = _states(RankState(0, "busy", stalled_for=12.0), RankState(1, "busy", stalled_for=1.0))
    assert live_verdict(rec, CFG, 20.0, one_moves) is None


def test_a_wait_longer_than_the_timeout_names_the_rank(tmp_path):
    rec = load_run(str(RunBuilder(tmp_path / "run").start(0).start(1).root))
    p = pending("all_reduce", 5, 20, 2.0)
    st = _states(RankState(0, "waiting", since=2.0, pending=p, hb_t=13.0), RankState(1, "busy", stalled_for=0.5))
    assert live_verdict(rec, CFG, 13.0, st) == ("timeout", "rank 0 waited 11 s (--timeout 10)")
    stale = _states(RankState(0, "waiting", since=2.0, pending=p, stale=True), RankState(1, "busy"))
    assert live_verdict(rec, CFG, 13.0, stale) is None  # an unresponsive rank's old wait is no verdict


def test_a_node_whose_ranks_ended_while_torchrun_waits_for_the_others(tmp_path):
    b = RunBuilder(tmp_path / "run")
    for r in (0, 1):  # this node: ranks 0 and 1 of four
        b.add(r, "events.jsonl", "start", 0.0, pid=999999, local_rank=r)
        b.add(r, "events.jsonl", "init", 0.1, global_rank=r, world_size=4, backend="gloo")
    rec = load_run(str(b.root))
    done = _states(RankState(0, "finished", ended_t=5.0), RankState(1, "finished", ended_t=6.0))
    assert live_verdict(rec, CFG, 15.0, done) is None
    assert live_verdict(rec, CFG, 16.5, done) == (
        "timeout",
        "every rank on this node ended 10 s ago; torchrun still waits for 2 ranks [2,3] on other nodes",
    )


def _raised(tmp_path, err: dict) -> tuple:
    b = RunBuilder(tmp_path / "run").start(0).start(1).finish(1, 2.0, code=1, exception=True)
    (b.root / "ranks" / "1" / "error.json").write_text(json.dumps(err))
    rec = load_run(str(b.root))
    return rec, _states(RankState(0, "busy"), RankState(1, "crashed", ended_t=2.0))


def test_an_exception_on_one_node_ends_the_job_of_the_others(tmp_path):
    err = {
        "type": "ValueError",
        "message": "loss is nan\nmore",
        "frames": [],
        "user_frame": ["/work/train.py", 21, "m"],
    }
    rec, states = _raised(tmp_path, err)
    assert crash_verdict(rec, states) == "rank 1 raised ValueError: loss is nan at train.py:21; rank 0 still running"
    states[0] = RankState(0, "finished", ended_t=3.0)
    assert crash_verdict(rec, states) is None  # nobody left to wait


def test_a_transport_error_is_a_victims_not_a_crash_verdict(tmp_path):
    err = {"type": "RuntimeError", "message": "Connection closed by peer [127.0.0.1]:45767", "frames": []}
    rec, states = _raised(tmp_path, err)
    assert crash_verdict(rec, states) is None


def test_the_status_line_shows_who_waits_where_once_someone_waited_2_s(tmp_path):
    rec = load_run(str(RunBuilder(tmp_path / "run").start(0).start(1).root))
    p = pending("all_reduce", 5, 20, 2.0)
    busy = RankState(1, "busy", where=Location(1, "/work/train.py", 31, "main"))
    st = _states(RankState(0, "waiting", since=2.0, pending=p, where=AT), busy)
    assert status_line(rec, CFG, 3.5, st) is None
    assert (
        status_line(rec, CFG, 5.0, st) == "rank 0 waiting 3 s in all_reduce at train.py:20; rank 1 busy at train.py:31"
    )
    blocked = RankState(0, "waiting", since=2.0, pending=p, where=AT, blocked=Location(0, "/work/train.py", 57, "m"))
    ddp = RankState(1, "ddp-wait", where=AT, seq_stable_for=4.0)
    assert status_line(rec, CFG, 5.0, _states(blocked, ddp)) == (
        "rank 0 blocked 3 s at train.py:57 waiting for all_reduce #5; rank 1 in DDP backward 4 s at train.py:20"
    )


def test_a_verdict_is_near_only_half_way_to_one(tmp_path):
    b = RunBuilder(tmp_path / "run").start(0).start(1)
    p = pending("all_reduce", 2, 20, 2.0)
    for r in (0, 1):
        b.hb(r, 1.0, 1).hb(r, 2.1, 2, p).hb(r, 2.4, 2, p)
    rec = load_run(str(b.root))
    cfg = Config(timeout=10.0, settle=1.0)
    assert not verdict_near(rec, cfg, 2.3) and not anyone_waiting(rec, cfg, 2.3)
    assert verdict_near(rec, cfg, 2.6) and anyone_waiting(rec, cfg, 2.6)  # settle / 2 = 0.5 s in the wait
    b.finish(0, 3.0, seq=2)
    assert verdict_near(load_run(str(b.root)), cfg, 3.1)  # a rank that ended


def test_restartable_a_failed_worker_is_torchruns_to_restart_a_deadlock_is_not(tmp_path):
    from ddpdoctor.analysis.live import restartable

    raised = RunBuilder(tmp_path / "raised").start(0).start(1).finish(1, 2.0, code=1, exception=True)
    exited = RunBuilder(tmp_path / "exited").start(0).start(1).finish(1, 2.0, code=3)
    early = RunBuilder(tmp_path / "early").start(0).start(1).finish(1, 2.0, code=0)
    stuck = RunBuilder(tmp_path / "stuck").start(0).start(1).hb(0, 2.0, 4, pending=pending("all_reduce", 5, 20, 1.0))
    assert restartable("certain", load_run(str(raised.root))) and restartable("timeout", load_run(str(exited.root)))
    assert not restartable("certain", load_run(str(early.root)))  # exit code 0: torchrun does not restart
    assert not restartable("certain", load_run(str(stuck.root)))
    assert restartable("crash", load_run(str(stuck.root)))
