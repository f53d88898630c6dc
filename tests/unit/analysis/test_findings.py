"""The words and orders every report shares (analysis/findings.py): rank ranges short at any world
size, rank phrases, values grouped by ranks, severity order, and the multi-node phrases."""

from __future__ import annotations

import pytest

from ddpdoctor.analysis.findings import (
    Location,
    analyze_command,
    group_values,
    rank_list,
    ranks_phrase,
    severity_rank,
    unseen_phrase,
)


@pytest.mark.parametrize(
    "ranks, text",
    [([], "[]"), ([3], "[3]"), ([0, 1], "[0,1]"), ([0, 1, 2, 3, 5, 7, 8, 9], "[0-3,5,7-9]"), ([9, 2, 2, 1], "[1,2,9]")],
)
def test_rank_list(ranks: list[int], text: str) -> None:
    assert rank_list(ranks) == text


def test_ranks_phrase_and_unseen_phrase() -> None:
    assert ranks_phrase([4]) == "rank 4" and ranks_phrase(range(1024)) == "1024 ranks [0-1023]"
    assert unseen_phrase([1]) == "rank 1 runs on another node and is not visible here"
    assert unseen_phrase([2, 3]) == "2 ranks [2,3] run on other nodes and are not visible here"
    assert analyze_command("/r") == "`ddpdoctor analyze /r OTHER_NODES_RUN_DIRS...`"


def test_group_values_puts_the_lead_ranks_then_the_small_groups_first() -> None:
    by_rank = {0: "barrier", 1: "barrier", 2: "barrier", 3: "all_reduce"}
    assert group_values(by_rank) == "rank 3: all_reduce; 3 ranks [0-2]: barrier"
    assert group_values(by_rank, first=[0]) == "3 ranks [0-2]: barrier; rank 3: all_reduce"
    assert group_values({0: "x", 1: "x"}, bare=True) == "x"


def test_severity_order_and_locations() -> None:
    assert [severity_rank(s) for s in ("error", "warning", "note", "bogus")] == [0, 1, 2, 3]
    assert Location(0, "/w/train.py", 12).short() == "/w/train.py:12"
