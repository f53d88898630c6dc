"""Each rank's state at a moment (analysis/state.py): not started, busy, waiting in a collective, inside
DDP, blocked at a sync point on an async collective, finished, crashed; transport errors told apart; a
fatal signal's error completed from faulthandler's dump and stderr; tracebacks' user frames; ops described
with their shapes."""

from __future__ import annotations

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.state import (
    complete_errors,
    describe_op,
    is_transport_error,
    ledger_entry_at,
    rank_state,
    user_frame_in,
)
from ddpdoctor.record.reader import RankRecord, RunRecord

CFG = Config(timeout=10.0)
SITE = ["/w/train.py", 30, "main"]
REC = RunRecord("/run", {"script": "/w/train.py"}, {}, [])


def _hb(t: float, **kw) -> dict:
    return {"kind": "hb", "t": t, "step": 4, "where": SITE, "seq": {"0": 5}, **kw}


def test_the_states_of_a_rank() -> None:
    assert rank_state(RankRecord(0), 5.0, CFG).state == "not-started"
    busy = rank_state(RankRecord(0, last_hb=_hb(4.9), progress_t=4.0), 5.0, CFG, REC)
    assert (busy.state, busy.where.line, busy.stalled_for, busy.stale) == ("busy", 30, 1.0, False)
    p = {"op": "barrier", "seq": 6, "site": ["/w/train.py", 44, "main"], "since": 2.0}
    w = rank_state(RankRecord(0, last_hb=_hb(1.0, pending=p)), 5.0, CFG, REC)
    assert (w.state, w.since, w.where.line, w.where.role, w.stale) == ("waiting", 2.0, 44, "waiting", True)
    assert (
        rank_state(RankRecord(0, last_hb=_hb(4.9, in_backward=True), seq_changed_t=3.0), 5.0, CFG).state == "ddp-wait"
    )


def test_a_rank_stalled_on_an_incomplete_async_collective_is_blocked_waiting() -> None:
    aw = {"op": "all_reduce", "seq": 6, "site": ["/w/train.py", 20, "main"], "since": 1.0}
    rec = RankRecord(0, last_hb=_hb(4.9, awaiting=aw), progress_t=2.0)
    st = rank_state(rec, 5.0, CFG, REC)
    assert st.state == "waiting" and st.proof_waiting and st.where.line == 20 and st.blocked.line == 30
    assert st.blocked.role == "blocked"
    moving = rank_state(RankRecord(0, last_hb=_hb(4.9, awaiting=aw), progress_t=4.8), 5.0, CFG, REC)
    assert moving.state == "busy"  # still moving: not blocked yet


def test_finished_and_crashed() -> None:
    fin = rank_state(RankRecord(0, events=[{"kind": "finish", "code": 0, "t": 3.0, "ddp_fwd": 9}]), 5.0, CFG)
    assert (fin.state, fin.exit_code, fin.ddp_fwd, fin.ended) == ("finished", 0, 9, True)
    err = rank_state(RankRecord(0, error={"type": "ValueError"}), 5.0, CFG)
    assert err.state == "crashed" and err.exit_code == 1


def test_transport_errors_make_victims() -> None:
    assert is_transport_error({"type": "RuntimeError", "message": "[pair.cc:553] Connection closed by peer"})
    assert is_transport_error({"type": "DistBackendError", "message": "x"})
    # gloo aborts the rank a peer's other call reached (a barrier met by an all_reduce): a victim of the parting
    for what in (
        "op.preamble.length <= op.nbytes. 4 vs 0",
        "op.preamble.roffset + op.preamble.length <= op.buf->size_",
    ):
        assert is_transport_error({"type": "FatalSignal", "message": f"[enforce fail at pair.cc:446] {what}"})
    assert not is_transport_error({"type": "ValueError", "message": "bad batch"}) and not is_transport_error(None)


def test_a_fatal_signal_gets_its_error_from_faulthandler_and_stderr() -> None:
    fatal = (
        "Fatal Python error: Aborted\n\nCurrent thread 0x00007f (most recent call first):\n"
        '  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2500 in all_reduce\n'
        '  File "/w/train.py", line 42 in main\n'
    )
    stderr = "terminate called after throwing an instance of 'gloo::EnforceNotMet'\n  what():  [enforce fail at pair.cc] op.preamble.length <= op.nbytes. 64 vs 16\n"
    rec = RunRecord("/run", {"script": "/w/train.py"}, {0: RankRecord(0, fatal=fatal, stderr_tail=stderr)}, [])
    done = complete_errors(rec)
    err = done.ranks[0].error
    assert (
        err["type"] == "FatalSignal" and err["user_frame"] == ["/w/train.py", 42, "main"] and err["op"] == "all_reduce"
    )
    assert err["message"].startswith("[enforce fail at pair.cc]") and rec.ranks[0].error is None  # input kept


def test_the_innermost_user_frame_of_a_traceback() -> None:
    tb = (
        'Traceback (most recent call last):\n  File "/w/train.py", line 80, in <module>\n'
        '  File "/w/train.py", line 42, in main\n  File "/venv/lib/python3.11/site-packages/torch/nn/m.py", line 9, in f\n'
    )
    assert user_frame_in(tb, REC) == ["/w/train.py", 42, "main"]


def test_ledger_entries_and_op_descriptions() -> None:
    rec = RankRecord(0, ledger=[{"group": "0", "seq": [1, 1], "op": "a"}, {"group": "0", "seq": [2, 4], "op": "b"}])
    assert ledger_entry_at(rec, "0", 3)["op"] == "b" and ledger_entry_at(rec, "0", 9) is None
    assert describe_op("all_reduce", [[4, 4], [], [2]]) == "all_reduce(4x4, scalar)"
    assert describe_op("barrier", [[4]]) == "barrier" and describe_op(None) == "?"


def test_a_ranks_steps_come_from_its_beats_and_finish_else_its_ddp_forwards() -> None:
    """The one notion of a step (rank/steps.py): ``steps`` where the rank wrote it; a record of an older
    ddpdoctor counts its DDP forwards (the beat's ``step``, the finish's ``ddp_fwd``, the counters file)."""
    from ddpdoctor.analysis.state import hb_steps, steps_of

    assert hb_steps({"step": 48, "steps": 12}) == 12 and hb_steps({"step": 48}) == 48
    assert hb_steps({"ddp_fwd": 7}) == 7 and hb_steps({}) == 0
    new = RankRecord(0, last_hb={"kind": "hb", "t": 1.0, "step": 40, "steps": 9})
    new.events.append({"kind": "finish", "t": 2.0, "ddp_fwd": 48, "steps": 12})
    assert steps_of(new) == 12
    old = RankRecord(1, last_hb={"kind": "hb", "t": 1.0, "step": 40}, counters={"ddp_fwd": 41})
    assert steps_of(old) == 41
