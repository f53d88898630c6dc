"""The running digest of a rank's collectives (record/digest.py): deterministic, the shapes counted only
for ops whose shapes must agree, the call line counted by file name and line (not directory), and the
fold order-sensitive."""

from __future__ import annotations

import zlib

from ddpdoctor.record.digest import fold, op_hash, shapes_text

SITE = ["/node0/checkout/train.py", 20, "main"]


def test_shapes_text_is_the_ledgers() -> None:
    assert shapes_text([[2, 3], [4]]) == "[[2,3],[4]]" and shapes_text(None) == "[]" and shapes_text([[]]) == "[[]]"


def test_op_hash_is_deterministic_and_counts_what_must_agree() -> None:
    assert op_hash("all_reduce", "[[4]]", SITE) == zlib.crc32(b"all_reduce[[4]]|train.py:20")
    assert op_hash("all_reduce", "[[4]]", SITE) != op_hash("all_reduce", "[[5]]", SITE)  # shaped op
    assert op_hash("barrier", "[[4]]", SITE) == op_hash("barrier", "[[5]]", SITE)  # shapes do not count
    other_checkout = ["/node1/elsewhere/train.py", 20, "main"]
    assert op_hash("all_reduce", "[[4]]", SITE) == op_hash("all_reduce", "[[4]]", other_checkout)
    assert op_hash("all_reduce", "[[4]]", SITE) != op_hash("all_reduce", "[[4]]", ["/x/train.py", 21, "main"])
    assert op_hash("barrier", "", None) == zlib.crc32(b"barrier|")


def test_fold_depends_on_order_and_stays_within_53_bits() -> None:
    a, b = op_hash("all_reduce", "[[4]]", SITE), op_hash("broadcast", "[[4]]", SITE)
    assert fold(fold(0, a), b) != fold(fold(0, b), a)
    d = 0
    for _ in range(1000):
        d = fold(d, a)
    assert 0 <= d < 2**53
