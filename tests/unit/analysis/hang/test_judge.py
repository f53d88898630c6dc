"""The hang judge's core: the ends of who-waits-for-whom chains, the odd ranks, and the walk to the first
position where the ranks' calls part."""

from __future__ import annotations

from collections.abc import Callable

from ddpdoctor.analysis.hang import judge
from ddpdoctor.analysis.hang.facts import ABSENT, Slot


def test_the_rank_at_the_end_of_a_chain_is_the_suspect():
    # 0 waits for 4 (pipeline), 4 waits for 8, 8 waits for 12, 12 waits for nobody
    assert judge.chain_ends({0: {4}, 4: {8}, 8: {12}, 12: set()}) == [12]
    # 12 left no record or has nothing pending: it is not a key at all
    assert judge.chain_ends({0: {4}, 4: {12}, 2: {14}}) == [12, 14]


def test_a_cycle_has_no_end_and_an_unresolved_wait_ends_nothing():
    # an extra call: 0 waits for 1 in group 0, 1 waits for 0 in group 1
    assert judge.chain_ends({0: {1}, 1: {0}}) == []
    # 1 waits in a group whose members nobody recorded: not a suspect on that ground
    assert judge.chain_ends({0: {1}, 1: set()}, unknown={1}) == []
    assert judge.chain_ends({}) == []


def test_the_rarest_call_names_the_odd_ranks_and_a_tie_names_nobody() -> None:
    assert judge.rarest({0: "barrier", 1: "barrier", 2: "all_reduce", 3: "barrier"}) == (2,)
    # no majority, but one call rarer than the others: its rank is the odd one out
    assert judge.rarest({0: "a", 1: "a", 2: "b", 3: "b", 4: "c"}) == (4,)
    # two ranks that disagree, or every rank alike: the evidence names no side
    assert judge.rarest({0: "a", 1: "b"}) == ()
    assert judge.rarest({0: "a", 1: "a"}) == ()
    assert judge.rarest({}) == ()


def test_an_extra_call_is_the_site_no_other_rank_reached_while_the_others_wait_at_one_it_used() -> None:
    regular, extra, helper = ("train.py", 29), ("train.py", 31), ("train.py", 12)
    history = {0: {regular, extra, helper}, 1: {regular, helper}}
    # rank 0 called the helper from its extra line: the helper's line is shared, the caller's is its own
    assert judge.extra_callers({0: [helper, extra], 1: [helper, regular]}, history) == {0: extra}
    # one site per rank (the ledger, the stacks)
    assert judge.extra_callers({0: [extra], 1: [regular]}, history) == {0: extra}
    # a symmetric if/else: each rank waits at a line of its own, so nobody made an extra call
    assert judge.extra_callers({0: [extra], 1: [("train.py", 40)]}, {0: {extra}, 1: {("train.py", 40)}}) == {}
    # a rank with no site of its own says nothing
    assert judge.extra_callers({0: [], 1: [regular]}, history) == {}


def test_an_insertion_is_one_call_more_followed_by_the_others_calls() -> None:
    # rank A made an extra "x", then the calls rank B makes from the same point on
    assert judge.insertion(["x", "a", "b"], ["a", "b", "c"]) == 2
    assert judge.insertion(["x", "a", "b", "c"], ["a", "b", "c"]) == 3
    # nothing after the extra call to compare: no evidence either way; a contradiction: no insertion
    assert judge.insertion(["x"], ["a", "b"]) == 0
    assert judge.insertion(["x", "a", "z"], ["a", "b"]) is None
    # the comparison is the caller's (the ledger compares op, shapes and line, not the objects)
    assert judge.insertion(["x", "A"], ["a"], lambda p, q: p.lower() == q.lower()) == 1


# The walk to the first parting, on sequences of the three sources' forms: the ledger's positions of a group
# (contiguous, a rank behind holds nothing past its last call), the dumps' completed positions (sparse, a rank
# without a record lost it) and the one position a stack shows.

A, B = ("train.py", 20, "step"), ("train.py", 31, "step")  # the loop's all_reduce; an extra one under a test


def _seqs(**per_rank: list[Slot]) -> tuple[list[int], Callable[[int, int], Slot]]:
    seqs = {int(r[1:]): s for r, s in per_rank.items()}

    def at(r: int, pos: int) -> Slot:
        return seqs[r][pos] if pos < len(seqs[r]) else Slot(ABSENT)

    return sorted(seqs), at


def test_the_walk_finds_the_first_position_where_the_calls_part_and_names_the_odd_rank() -> None:
    ar = Slot("all_reduce", A, [[4]])
    ranks, at = _seqs(r0=[ar, ar, ar], r1=[ar, ar, ar], r2=[ar, Slot("broadcast", B, [[4]]), ar])
    sites = {0: {A}, 1: {A}, 2: {A, B}}
    parts = list(judge.partings(ranks, range(5), at, sites_of=sites))
    assert [(p.pos, p.odd, p.kind, p.exclusive) for p in parts] == [(1, (2,), "op-mismatch", True)]
    # the same op with other shapes: a shape mismatch, odd by the rarest key
    big = Slot("all_reduce", A, [[8]])
    ranks, at = _seqs(r0=[ar, ar], r1=[ar, big], r2=[ar, ar])
    assert [(p.pos, p.odd, p.kind) for p in judge.partings(ranks, range(3), at)] == [(1, (1,), "shape-mismatch")]


def test_two_sides_are_told_apart_by_a_line_no_other_rank_reaches_or_not_at_all() -> None:
    ranks, at = _seqs(r0=[Slot("all_reduce", A)], r1=[Slot("broadcast", B)])
    # rank 1's line is its own, rank 0's is one rank 1 used before: rank 1 left the common path
    (p,) = judge.partings(ranks, range(1), at, sites_of={0: {A}, 1: {A, B}})
    assert p.odd == (1,) and p.exclusive
    # each side's line its own (a symmetric if/else): no side is named
    (p,) = judge.partings(ranks, range(1), at, sites_of={0: {A}, 1: {B}})
    assert p.odd == (0, 1) and not p.exclusive


def test_the_same_op_from_an_extra_line_parts_only_where_the_sequence_shifted() -> None:
    ranks, at = _seqs(r0=[Slot("all_reduce", A)], r1=[Slot("all_reduce", B)])
    (p,) = judge.partings(ranks, range(1), at, sites_of={0: {A}, 1: {A, B}})
    assert (p.odd, p.kind) == ((1,), "extra-call")
    assert list(judge.partings(ranks, range(1), at, sites_of={0: {A}, 1: {B}})) == []  # if/else: no parting
    assert list(judge.partings(ranks, range(1), at)) == []  # no lines known: not compared


def test_a_rank_behind_is_passed_over_a_rank_that_ended_parts_and_p2p_is_never_compared() -> None:
    ar = Slot("all_reduce", A)
    ranks, at = _seqs(r0=[ar, Slot("send", A), ar], r1=[ar, Slot("recv", B), ar, ar], r2=[ar, Slot("recv", B), ar])
    assert list(judge.partings(ranks, range(9), at)) == []  # 1 is ahead, 0 and 2 behind: the walk stops at 4
    (p,) = judge.partings(ranks, range(9), at, ended={2})
    assert (p.pos, p.odd, p.kind) == (3, (2,), "exited")


def test_sparse_completed_positions_compare_the_ranks_that_recorded_them() -> None:
    def sig(dtype: str) -> tuple:
        return (("all_reduce", ((4,),), (dtype,)),)

    held = {(0, ("0", 7)): sig("f32"), (1, ("0", 7)): sig("f16"), (2, ("0", 9)): sig("f32")}

    def at(r: int, pos: tuple[str, int]) -> Slot:
        s = held.get((r, pos))
        return Slot("all_reduce", agree=s) if s else Slot(ABSENT)

    positions = [("0", 3), ("0", 7), ("0", 9)]  # no rank recorded #3 any more, rank 2 lost #7 from its ring
    (p,) = judge.partings([0, 1, 2], positions, at, partial=True)
    assert (p.pos, p.odd, p.kind, sorted(p.slots)) == (("0", 7), (0, 1), "shape-mismatch", [0, 1])
    # read as a contiguous sequence, the same records stop at the first position nobody holds
    assert list(judge.partings([0, 1, 2], positions, at)) == []


def test_routine_names_the_rank_that_left_what_every_earlier_step_did():
    step = ["fwd", "fwd", "bwd", "rs"]
    calls = {0: step * 3 + ["fwd", "fwd", "bwd"], 1: step * 3 + ["fwd", "bwd", "rs"]}
    assert judge.routine(calls) == (13, (1,), "fwd")
    # no repetition before the parting, or every rank left it: no answer
    assert judge.routine({0: ["a", "b", "c"], 1: ["a", "b", "d"]}) is None
    assert judge.routine({0: step * 2 + ["x"], 1: step * 2 + ["y"]}) is None
    # two equal calls in a row are no routine of period 1: the step's own period decides
    step = ["ag", "ag", "ag", "ar", "ag", "ar", "ar"]
    assert judge.routine({0: step * 3 + ["metric"], 1: step * 3 + ["ag"]}) == (21, (0,), "ag")
    assert judge.routine({0: step * 2, 1: step * 2}) is None
