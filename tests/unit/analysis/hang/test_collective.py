"""The hang probes a second time under NCCL's CPU-side semantics (tests/ncclsim/sitecustomize.py): a
collective called from the user's code returns at once and completes later; the CPU blocks only at
Work.wait(), in DDP's backward or at a barrier. The verdicts must not change: the ledger, the tracked
Works and the blocked-at-a-sync-point rule carry them where no rank sits inside a collective call."""

from __future__ import annotations

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.hang import collective


def test_silent_shape_mismatch_from_ledgers(tmp_path):
    """Pure: two ranks' ledgers hold all_reduce #4 with 3 and 4 elements; both finished."""
    from builder import RunBuilder

    from ddpdoctor.record.reader import load_run

    b = RunBuilder(tmp_path / "run")
    for r in (0, 1):
        b.start(r).coll(r, 3, 12).coll(r, 4, 17, shapes=((3 + r,),)).finish(r, 5.0, seq=4)
    fs = collective.detect(load_run(str(tmp_path / "run")), Config())
    assert [f.id for f in fs] == ["collective.shape-mismatch"]
    assert "rank 0: all_reduce(3)" in fs[0].message and "rank 1: all_reduce(4)" in fs[0].message
    assert {(l.rank, l.line) for l in fs[0].locations} == {(0, 17), (1, 17)}
    b2 = RunBuilder(tmp_path / "ok")
    for r in (0, 1):
        b2.start(r).coll(r, 3, 12).coll(r, 4, 17).finish(r, 5.0, seq=4)
    assert collective.detect(load_run(str(tmp_path / "ok")), Config()) == []
