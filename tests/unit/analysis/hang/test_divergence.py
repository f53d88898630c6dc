"""divergence on hand-built ledgers: a rank's sequence with DDP's internal positions filled in, the first
position where the ranks part (op, shape, an extra call from a line of its own, a rank that exited), and
none for ranks that agree or are merely behind."""

from __future__ import annotations

from builder import RunBuilder, pending

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.hang.divergence import ABSENT, INTERNAL, first_divergence, main_group, sequence
from ddpdoctor.analysis.state import all_states
from ddpdoctor.record.reader import load_run

CFG = Config(timeout=10.0)


def _judge(b: RunBuilder, now: float = 5.0):
    record = load_run(str(b.root))
    states = all_states(record, now, CFG)
    return record, states, first_divergence(record, states)


def _both(b: RunBuilder, seqs: range, line: int = 20) -> RunBuilder:
    for s in seqs:
        b.coll(0, s, line).coll(1, s, line)
    return b


def test_sequence_fills_the_positions_no_ledger_entry_covers_as_ddp_internal(tmp_path):
    b = RunBuilder(tmp_path / "run").start(0).coll(0, 1, 10, "broadcast").coll(0, 4, 20)
    record = load_run(str(b.root))
    seq = sequence(record, 0, "0", 5)
    assert [seq[s].op for s in range(1, 6)] == ["broadcast", INTERNAL, INTERNAL, "all_reduce", INTERNAL]
    assert seq[4].site == ("/work/train.py", 20, "main")


def test_ranks_that_issued_the_same_calls_have_no_divergence(tmp_path):
    b = _both(RunBuilder(tmp_path / "run").start(0).start(1), range(1, 5))
    p = pending("all_reduce", 5, 20, 2.0)
    b.hb(0, 2.1, 5, p).hb(1, 2.1, 5, p)
    record, states, div = _judge(b)
    assert main_group(record, states) == "0" and div is None


def test_different_ops_at_the_same_position_are_an_op_mismatch_at_that_position(tmp_path):
    b = _both(RunBuilder(tmp_path / "run").start(0).start(1), range(1, 5))
    b.hb(0, 2.1, 5, pending("all_reduce", 5, 20, 2.0)).hb(1, 2.1, 5, pending("barrier", 5, 30, 2.0, ()))
    _, _, div = _judge(b)
    assert div is not None and (div.group, div.seq, div.kind) == ("0", 5, "op-mismatch")
    assert (div.slots[0].op, div.slots[1].op) == ("all_reduce", "barrier")
    assert div.diverged == (1,)  # its barrier's line is one rank 0 never reaches, rank 0's line 20 is shared


def test_an_uneven_all_to_all_single_is_no_divergence(tmp_path):
    # MoE token routing: all_to_all_single with split sizes, each rank's input and output of its own size. A hang
    # after it must not be blamed on it (it was, as a shape mismatch, on a real 2-rank gloo job)
    b = _both(RunBuilder(tmp_path / "run").start(0).start(1), range(1, 3))
    b.coll(0, 3, 25, "all_to_all_single", ((3, 4), (5, 4))).coll(1, 3, 25, "all_to_all_single", ((5, 4), (3, 4)))
    p = pending("barrier", 4, 30, 2.0, ())
    b.hb(0, 2.1, 4, p).hb(1, 2.1, 4, p)
    _, _, div = _judge(b)
    assert div is None


def test_the_same_op_with_other_shapes_is_a_shape_mismatch(tmp_path):
    b = _both(RunBuilder(tmp_path / "run").start(0).start(1), range(1, 3))
    b.hb(0, 2.1, 3, pending("all_reduce", 3, 20, 2.0, ((3,),))).hb(1, 2.1, 3, pending("all_reduce", 3, 20, 2.0))
    _, _, div = _judge(b)
    assert div is not None and (div.seq, div.kind) == (3, "shape-mismatch")


def test_an_extra_call_from_a_line_of_its_own_is_exclusive_to_that_rank(tmp_path):
    b = _both(RunBuilder(tmp_path / "run").start(0).start(1), range(1, 4))
    b.coll(0, 4, 22).coll(0, 5, 20).coll(1, 4, 20)  # rank 0's all_reduce at line 22 is extra
    b.hb(0, 2.1, 5, pending("all_reduce", 6, 20, 2.0)).hb(1, 2.1, 4, pending("barrier", 5, 30, 2.0, ()))
    _, _, div = _judge(b)
    assert div is not None and (div.seq, div.kind, div.diverged, div.exclusive) == (4, "extra-call", (0,), True)
    assert div.slots[0].site[1] == 22 and div.slots[1].site[1] == 20


def test_a_rank_that_finished_before_the_others_last_call_exited_there(tmp_path):
    b = _both(RunBuilder(tmp_path / "run").start(0).start(1), range(1, 4))
    b.finish(1, 2.0, seq=3)
    b.hb(0, 2.1, 4, pending("all_reduce", 4, 20, 2.0))
    _, _, div = _judge(b)
    assert div is not None and (div.seq, div.kind, div.diverged) == (4, "exited", (1,))
    assert div.slots[1].op == ABSENT


def test_a_rank_merely_behind_is_no_divergence(tmp_path):
    b = _both(RunBuilder(tmp_path / "run").start(0).start(1), range(1, 4))
    b.hb(0, 2.1, 4, pending("all_reduce", 4, 20, 2.0)).hb(1, 2.1, 3, where=31)
    _, _, div = _judge(b)
    assert div is None


def test_a_send_against_a_recv_at_one_position_is_a_pair_not_a_divergence(tmp_path):
    """gloo counts a p2p op in the group's sequence on the ranks that take part: rank 0 sends while rank 1
    receives at #3, then the reverse at #4. A later divergence (rank 1's extra barrier at #6, from a line rank 0
    never reaches) is the first one, not the send against the recv (zoojob.py's ``extra`` was blamed on it)."""
    b = _both(RunBuilder(tmp_path / "run").start(0).start(1), range(1, 3))
    b.coll(0, 3, 40, "send", ((8,),)).coll(1, 3, 41, "recv", ((8,),))
    b.coll(0, 4, 41, "recv", ((8,),)).coll(1, 4, 40, "send", ((8,),))
    _both(b, range(5, 6))
    b.hb(0, 2.1, 6, pending("all_reduce", 6, 20, 2.0)).hb(1, 2.1, 6, pending("barrier", 6, 50, 2.0, ()))
    _, _, div = _judge(b)
    assert div is not None and (div.seq, div.kind, div.diverged) == (6, "op-mismatch", (1,)), div


def test_p2p_between_some_ranks_shifts_no_position_of_the_walk(tmp_path):
    """Pipeline stages on gloo (tests/scripts/pipeline_stages.py): rank 0 sends to rank 1 every step and rank 2
    takes no part, so ranks 0 and 1 count one position a step more than rank 2. The walk compares each rank's
    calls in order without its p2p ops: rank 2's extra all_reduce (#7, its own position) meets the stages'
    step all_reduce (their #11), not the stages' all_reduce against rank 2's barrier at a shifted #2."""
    b = RunBuilder(tmp_path / "run").start(0).start(1).start(2)
    for k in range(3):
        b.coll(0, 3 * k + 1, 40, "send").coll(1, 3 * k + 1, 41, "recv")
        for r in (0, 1):
            b.coll(r, 3 * k + 2, 21).coll(r, 3 * k + 3, 23, "barrier", ())
        b.coll(2, 2 * k + 1, 21).coll(2, 2 * k + 2, 23, "barrier", ())
    b.coll(0, 10, 40, "send").coll(1, 10, 41, "recv")
    b.hb(0, 2.1, 11, pending("all_reduce", 11, 21, 2.0)).hb(1, 2.1, 11, pending("all_reduce", 11, 21, 2.0))
    b.hb(2, 2.1, 7, pending("all_reduce", 7, 17, 2.0, ((2,),)))
    _, _, div = _judge(b)
    assert div is not None and (div.seq, div.kind, div.diverged) == (7, "shape-mismatch", (2,)), div
    assert (div.position(0), div.position(1), div.position(2)) == (11, 11, 7)
    assert div.slots[2].site[1] == 17 and div.slots[0].site[1] == 21
