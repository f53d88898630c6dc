"""The hang judge's core: the ends of who-waits-for-whom chains."""

from __future__ import annotations

from ddpdoctor.analysis.hang import judge


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
