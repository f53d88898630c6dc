"""waits on hand-built rank states: the words and places for where a rank stands (its slot, its pending
call, its source line), the receive cycle with no sender, and the timeout findings (a transport stall,
ranks blocked outside any collective, waiting vs busy ranks, ranks on another node)."""

from __future__ import annotations

from builder import RunBuilder

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Location
from ddpdoctor.analysis.hang import waits
from ddpdoctor.analysis.hang.divergence import ABSENT, INTERNAL, Slot
from ddpdoctor.analysis.state import RankState
from ddpdoctor.record.reader import load_run

CFG = Config(timeout=10.0)
SCRIPT = "import torch\nwork = dist.all_reduce(x, async_op=True)\nwork.wait()  # blocks here\n"


def _where(path: str, line: int) -> Location:
    return Location(0, path, line, "main", "")


def _record(tmp_path, ranks=(0, 1)):
    b = RunBuilder(tmp_path / "run")
    for r in ranks:
        b.start(r)
    return load_run(str(b.root))


def _waiting(rank: int, op: str, seq: int, line: int, **p) -> RankState:
    where = Location(rank, "/work/train.py", line, "main", "")
    pend = {"op": op, "group": "0", "seq": seq, "shapes": [[4]], "site": ["/work/train.py", line, "main"], **p}
    return RankState(rank, "waiting", since=2.0, pending=pend, where=where, seq={"0": seq})


def test_slot_text_names_the_op_shapes_and_line():
    assert waits.slot_text(Slot("all_reduce", ("/w/train.py", 12, "m"), [[4, 4]])) == "all_reduce(4x4) at train.py:12"
    assert waits.slot_text(Slot(INTERNAL)) == "a DDP all-reduce/broadcast"
    assert waits.slot_text(Slot(ABSENT)) == "nothing (exited)"


def test_code_reads_the_source_line_without_its_comment(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    assert waits.at(_where(str(path), 3)) == "train.py:3" and waits.at(None) == "?"
    assert waits.code(_where(str(path), 3)) == " (`work.wait()`)"
    assert waits.code(None) == ""


def test_state_text_for_blocked_waiting_and_busy_ranks(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    blocked = RankState(
        0,
        "waiting",
        pending={"op": "all_reduce", "seq": 7, "shapes": [[4]]},
        where=_where(str(path), 2),
        blocked=_where(str(path), 3),
    )
    assert waits.state_text(blocked) == (
        "blocked at train.py:3 (`work.wait()`) waiting for all_reduce(4) #7 issued at train.py:2"
    )
    assert waits.state_text(_waiting(1, "barrier", 3, 30)) == "waiting in barrier at train.py:30"
    assert waits.state_text(RankState(1, "busy", where=_where("/w/train.py", 9))) == "busy at train.py:9"


def test_slot_loc_of_a_rank_that_exited_is_its_last_collective(tmp_path):
    b = RunBuilder(tmp_path / "run").start(0).coll(0, 1, 17).finish(0, 2.0, seq=1)
    record = load_run(str(b.root))
    st = RankState(0, "finished")
    l = waits.slot_loc(record, 0, Slot(ABSENT), {0: st}, "exited")
    assert (l.rank, l.line, l.role) == (0, 17, "exited after its last collective here")
    l = waits.slot_loc(record, 0, Slot("all_reduce", ("/work/train.py", 22, "main")), {0: st}, "diverged")
    assert (l.line, l.role) == (22, "diverged")


def test_best_where_prefers_the_pending_collective_over_the_current_line(tmp_path):
    record = _record(tmp_path)
    st = _waiting(0, "all_reduce", 4, 20)
    st = RankState(0, "waiting", pending=st.pending, where=_where("/work/train.py", 99))
    assert waits.best_where(record, st, "waiting").line == 20
    assert waits.best_where(record, RankState(1, "busy", where=_where("/work/train.py", 31)), "busy").line == 31


def test_every_rank_receiving_with_no_sender_is_a_receive_cycle():
    states = {0: _waiting(0, "recv", 1, 40, peer=1), 1: _waiting(1, "recv", 1, 41, peer=0)}
    f = waits.receive_cycle(states)
    assert f is not None and f.id == "hang.p2p-deadlock" and f.culprits == (0, 1)
    assert "rank 0: in recv from rank 1 at train.py:40" in f.message


def test_a_pending_send_or_a_rank_in_another_collective_breaks_the_cycle():
    assert waits.receive_cycle({0: _waiting(0, "recv", 1, 40, sends=1), 1: _waiting(1, "recv", 1, 41)}) is None
    assert waits.receive_cycle({0: _waiting(0, "recv", 1, 40), 1: _waiting(1, "all_reduce", 1, 41)}) is None


def test_timeout_with_every_rank_in_the_same_collective_is_a_transport_stall(tmp_path):
    record = _record(tmp_path)
    states = {r: _waiting(r, "all_reduce", 5, 20) for r in (0, 1)}
    f = waits.timeout_finding(record, states, 15.0, CFG, {"reason": "x"})
    assert f.id == "hang.transport-stall" and f.message == "all ranks inside the same all_reduce (#5) for over 10 s"


def test_timeout_with_a_busy_rank_names_it_the_culprit(tmp_path):
    record = _record(tmp_path)
    states = {0: _waiting(0, "all_reduce", 5, 20), 1: RankState(1, "busy", where=Location(1, "/w/t.py", 31, "f", ""))}
    f = waits.timeout_finding(record, states, 15.0, CFG, {"reason": "x"})
    assert f.id == "hang.timeout" and f.culprits == (1,)
    assert f.message == "no progress for 10 s: rank 1: busy at t.py:31; rank 0: waiting in all_reduce at train.py:20"


def test_the_busy_rank_a_waiting_rank_waits_for_is_the_culprit_not_every_busy_rank(tmp_path):
    """Two pipeline stages, each with its own group: rank 0 waits in stage A's all-reduce #5 for rank 1, which
    issued only 4 and computes; ranks 2 and 3 (stage B) compute too, and nobody waits for them. The rule of the
    flight recorder's judgement (judge.chain_ends over who waits for whom) names rank 1 alone; before, every
    busy rank was a culprit."""
    record = _record(tmp_path, ranks=(0, 1, 2, 3))

    def busy(r: int, seq: dict) -> RankState:
        return RankState(r, "busy", where=Location(r, "/w/t.py", 40 + r, "f", ""), seq=seq)

    w = _waiting(0, "all_reduce", 5, 20)
    w = RankState(0, "waiting", since=2.0, pending={**(w.pending or {}), "group": "A"}, where=w.where, seq={"A": 5})
    states = {0: w, 1: busy(1, {"A": 4}), 2: busy(2, {"B": 9}), 3: busy(3, {"B": 9})}
    assert waits.waits_for(states) == ({0: {1}}, set())
    f = waits.timeout_finding(record, states, 15.0, CFG, {"reason": "x"})
    assert f.id == "hang.timeout" and f.culprits == (1,)
    assert f.message.startswith("no progress for 10 s: rank 1: busy at t.py:41;"), f.message
    assert f.evidence["waits_for"] == {"0": [1]}
    # rank 1 issued #5 already (an async call): the counts name no busy rank, so every busy rank is named
    states[1] = busy(1, {"A": 5})
    assert waits.waits_for(states) == ({0: set()}, set())
    assert waits.timeout_finding(record, states, 15.0, CFG, {"reason": "x"}).culprits == (1, 2, 3)


def test_ranks_blocked_outside_a_collective_are_a_timeout_at_their_lines(tmp_path):
    record = _record(tmp_path)
    states = {r: RankState(r, "busy", where=Location(r, "/w/t.py", 50 + r, "f", "")) for r in (0, 1)}
    f = waits.timeout_finding(record, states, 15.0, CFG, {"reason": "no rank made progress for 10 s"})
    assert f.id == "hang.timeout" and f.culprits == (0, 1)
    assert "no rank made progress for 10 s" in f.message and "blocked at t.py:50" in f.message
    assert {(l.rank, l.line, l.role) for l in f.locations} == {(0, 50, "blocked"), (1, 51, "blocked")}


def test_ranks_on_another_node_are_named_unseen_with_the_analyze_command(tmp_path):
    record = _record(tmp_path, ranks=(0,))  # world_size 2, only rank 0's records here
    f = waits.timeout_finding(record, {0: _waiting(0, "all_reduce", 5, 20)}, 15.0, CFG, {"reason": "x"})
    assert f.id == "hang.timeout" and "rank 1 runs on another node and is not visible here" in f.message
    assert "ddpdoctor analyze" in f.hint and f.evidence["unseen_ranks"] == [1]
