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


# -- the recorder's chunks (chunks_of): what the rank keeps of every read of torch's ring ----------------------


def _e(pos: int, line: int = 20, op: str = "all_reduce", by: str | None = None) -> dict:
    """A ledger entry as record/flight.py ``entries`` makes it from one recorded call."""
    e = {"op": op, "group": "0", "seq": [pos, pos], "shapes": [[4]], "site": ["/w/train.py", line, "main"]}
    return {**e, "by": by} if by else e


def test_chunk_size_is_a_quarter_of_the_ring_within_bounds() -> None:
    from ddpdoctor.record.digest import chunk_size

    assert [chunk_size(b) for b in (2, 16, 64, 2000, 100_000)] == [4, 4, 16, 500, 512]


def test_only_whole_chunks_are_kept_and_none_twice() -> None:
    from ddpdoctor.record.digest import chunks_of

    calls = [_e(p) for p in range(1, 11)]
    got = chunks_of(calls, wrapped=False, size=4)
    assert sorted(got["0"]) == ["0", "1"]  # 1-4, 5-8; 9-10 is not whole yet
    assert got["0"]["0"][1] == {"all_reduce train.py:20": 4}
    assert chunks_of(calls, wrapped=False, size=4, have=got) == {}
    # a wrapped ring holds the group from its oldest entry on: 3-4 of chunk 0 are not the whole chunk
    assert sorted(chunks_of(calls[2:], wrapped=True, size=4)["0"]) == ["1"]
    # unwrapped, a first position above 1 is a p2p op's (gloo counts them, records none): the chunk is whole
    assert sorted(chunks_of(calls[2:], wrapped=False, size=4)["0"]) == ["0", "1"]


def test_a_chunk_tells_an_extra_call_and_its_line() -> None:
    from ddpdoctor.record.digest import chunks_of

    same = chunks_of([_e(p) for p in range(1, 9)], wrapped=False, size=4)["0"]
    shifted = chunks_of([_e(1), _e(2), _e(3, line=30), *[_e(p) for p in range(4, 9)]], wrapped=False, size=4)["0"]
    assert same["0"][0] != shifted["0"][0] and same["1"] == shifted["1"]
    assert shifted["0"][1] == {"all_reduce train.py:20": 3, "all_reduce train.py:30": 1}


def test_ddps_bucket_calls_count_without_the_line_backward_was_called_from() -> None:
    from ddpdoctor.record.digest import chunks_of

    a = chunks_of([_e(p, line=40, by="autograd") for p in range(1, 5)], wrapped=False, size=4)["0"]["0"]
    b = chunks_of([_e(p, line=41, by="autograd") for p in range(1, 5)], wrapped=False, size=4)["0"]["0"]
    assert a == b and a[1] == {"all_reduce (autograd)": 4}
