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
