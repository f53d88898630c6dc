"""digest on hand-built trimmed ledgers: ranks whose running digests at the start of the common ledger
window differ are named (and the hang finding says so), ranks that agree or whose ledger and digest do
not line up are not judged, and findings other than hangs are left alone."""

from __future__ import annotations

from builder import RunBuilder

from ddpdoctor.analysis.findings import Finding
from ddpdoctor.analysis.hang import digest
from ddpdoctor.record.digest import fold, op_hash, shapes_text
from ddpdoctor.record.reader import load_run

SITE = ["/work/train.py", 20, "main"]


def _rank(b: RunBuilder, r: int, c0: int, d0: int, n: int, now: int | None = None) -> None:
    """Rank ``r`` kept ``n`` all_reduce calls at line 20 after ``c0`` calls of digest ``d0``."""
    b.start(r)
    for s in range(c0 + 1, c0 + n + 1):
        b.coll(r, s, 20)
    b.finish(r, 3.0, seq=c0 + n, digest={"0": [now if now is not None else c0 + n, 0]}, digest0={"0": [c0, d0]})


def _folded(d0: int, calls: int) -> int:
    h = op_hash("all_reduce", shapes_text([[4]]), SITE)
    for _ in range(calls):
        d0 = fold(d0, h)
    return d0


def _hang() -> Finding:
    return Finding("hang.timeout", "error", "no progress for 10 s", "hint", (0, 1), (), {}, culprits=(1,))


def test_ranks_with_the_same_digest_at_the_window_start_are_not_judged(tmp_path):
    b = RunBuilder(tmp_path / "run")
    _rank(b, 0, 8, 1234, 5)  # its digest at call 10 is 1234 folded over its two calls 9 and 10
    _rank(b, 1, 10, _folded(1234, 2), 3)
    record = load_run(str(b.root))
    assert digest.before_window(record) is None
    assert digest.annotate([_hang()], record)[0].message == "no progress for 10 s"


def test_ranks_whose_digests_differ_before_the_window_are_named(tmp_path):
    b = RunBuilder(tmp_path / "run")
    _rank(b, 0, 8, 1234, 5)
    _rank(b, 1, 10, _folded(1234, 2) + 1, 3)
    record = load_run(str(b.root))
    info = digest.before_window(record)
    assert info is not None and (info["group"], info["count"], info["kept"]) == ("0", 10, 3)
    assert sorted(info["digests"].values()) == [[0], [1]]
    (f,) = digest.annotate([_hang()], record)
    assert f.message.startswith("no progress for 10 s; the ranks' collective sequences of group 0 already differed")
    assert "within their first 10 Python-level calls" in f.message and "DDPDOCTOR_LEDGER_RING" in f.message
    assert f.evidence["before_window"] == info and f.culprits == (1,)


def test_a_ledger_that_does_not_start_where_its_digest0_says_is_not_judged(tmp_path):
    b = RunBuilder(tmp_path / "run")
    _rank(b, 0, 8, 1234, 5)
    _rank(b, 1, 10, 999, 3, now=14)  # 10 + 3 kept calls is not 14
    assert digest.before_window(load_run(str(b.root))) is None


def test_whole_ledgers_and_findings_other_than_hangs_are_left_alone(tmp_path):
    b = RunBuilder(tmp_path / "run")
    _rank(b, 0, 0, 0, 3)
    _rank(b, 1, 0, 0, 3)
    assert digest.before_window(load_run(str(b.root))) is None
    b2 = RunBuilder(tmp_path / "run2")
    _rank(b2, 0, 8, 1234, 5)
    _rank(b2, 1, 10, 7, 3)
    crash = Finding("crash.exception", "error", "rank 1 raised", "h", (0, 1), (), {}, culprits=(1,))
    assert digest.annotate([crash], load_run(str(b2.root))) == [crash]
