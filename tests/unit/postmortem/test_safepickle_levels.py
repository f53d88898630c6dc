"""The safe unpickler's plain-data check, walked level by level: every non-plain value is refused at any
depth, and shared references (a pickle's memo) are walked once, not once per reference."""

from __future__ import annotations

import pickle

import pytest

from ddpdoctor.postmortem import safepickle


@pytest.mark.parametrize(
    "bad", [{1, 2}, [1, [2, (3, frozenset())]], {"a": bytearray(b"x")}, {(1, frozenset()): 2}, [[[[[{3}]]]]]]
)
def test_non_plain_values_are_refused_at_any_depth(bad):
    with pytest.raises(safepickle.UnsafePickle):
        safepickle.loads(pickle.dumps(bad, protocol=5))  # sets and bytearrays need no global in protocol 4+


def test_shared_references_are_walked_once():
    a: list = []
    for _ in range(60):  # 2**60 paths to the innermost list: a walk per reference would never end
        a = [a, a]
    safepickle.check_plain(safepickle.loads(pickle.dumps(a)))
    deep: list = []
    for _ in range(10_000):  # deep nesting: no recursion limit
        deep = [deep]
    safepickle.check_plain(deep)
