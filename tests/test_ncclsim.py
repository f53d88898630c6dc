"""The hang probes a second time under NCCL's CPU-side semantics (tests/ncclsim/sitecustomize.py): a
collective called from the user's code returns at once and completes later; the CPU blocks only at
Work.wait(), in DDP's backward or at a barrier. The verdicts must not change: the ledger, the tracked
Works and the blocked-at-a-sync-point rule carry them where no rank sits inside a collective call."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import PROBES, ddpdoctor, finding, lines_of, marker_line

from ddpdoctor.analysis import collective
from ddpdoctor.analysis.config import Config

SIM = {"DDPDOCTOR_TEST_NCCLSIM": "1", "PYTHONPATH": str(Path(__file__).parent / "ncclsim")}

CASES = [  # probe, finding, culprits, (rank, marker) that must be among the finding's lines
    ("rank_conditional.py", "hang.rank-conditional-collective", [0], (0, "EXTRA")),
    ("trainer_async_save.py", "hang.rank-conditional-collective", [0], (0, "EXTRA")),
    ("async_sync_point.py", "hang.rank-conditional-collective", [0], (0, "EXTRA")),
    ("recv_deadlock.py", "hang.p2p-deadlock", [0, 1], (1, "WAIT")),
    ("uneven_batches.py", "hang.uneven-batches", None, (0, "BACKWARD")),
]


@pytest.mark.parametrize("probe,fid,culprits,where", CASES, ids=[c[0][:-3] for c in CASES])
def test_hang_probe_under_nccl_semantics(tmp_path, probe, fid, culprits, where):
    r = ddpdoctor(["hang", "--script", str(PROBES / probe), "--timeout", "120"], tmp_path, timeout=150, env=SIM)
    assert "ncclsim: not installed" not in r.err
    assert r.code == 3, r.err[-2000:]
    f = finding(r.report, fid)
    if culprits is not None:
        assert f["culprits"] == culprits
    assert marker_line(PROBES / probe, where[1]) in lines_of(f, where[0])


def test_the_simulation_returns_before_completion(tmp_path):
    """The check that the simulation is on: under it a sync all_reduce of mismatched sizes returns and the
    run goes on (gloo alone aborts); ddpdoctor then reports the silent mismatch from the ledgers."""
    probe = PROBES / "shape_mismatch.py"
    r = ddpdoctor(["check", "--script", str(probe)], tmp_path, timeout=150, env=SIM)
    if r.report and any(f["id"].startswith("crash") or f["id"] == "hang.shape-mismatch" for f in r.report["findings"]):
        pytest.skip("gloo's background work aborted the rank before the run ended (timing)")
    f = finding(r.report, "collective.shape-mismatch")
    assert f["culprits"] == [0, 1] and r.code == 1
    assert lines_of(f, 0) == lines_of(f, 1) == {marker_line(probe, "GATHER")}


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
