"""The hang probes a second time under NCCL's CPU-side semantics (tests/ncclsim/sitecustomize.py): a
collective called from the user's code returns at once and completes later; the CPU blocks only at
Work.wait(), in DDP's backward or at a barrier. The verdicts must not change: the ledger, the tracked
Works and the blocked-at-a-sync-point rule carry them where no rank sits inside a collective call."""

from __future__ import annotations

import pytest
from helpers import PROBES, TESTS, ddpdoctor, finding, lines_of, marker_line

from ddpdoctor.analysis.config import Config

SIM = {"DDPDOCTOR_TEST_NCCLSIM": "1", "PYTHONPATH": str(TESTS / "ncclsim")}

CASES = [  # probe, finding, culprits, (rank, marker) that must be among the finding's lines
    ("rank_conditional.py", "hang.rank-conditional-collective", [0], (0, "EXTRA")),
    ("trainer_async_save.py", "hang.rank-conditional-collective", [0], (0, "EXTRA")),
    ("async_sync_point.py", "hang.rank-conditional-collective", [0], (0, "EXTRA")),
    ("recv_deadlock.py", "hang.p2p-deadlock", [0, 1], (1, "WAIT")),
    ("uneven_batches.py", "hang.uneven-batches", None, (0, "BACKWARD")),
]


@pytest.mark.parametrize("probe,fid,culprits,where", CASES, ids=[c[0][:-3] for c in CASES])
def test_hang_probe_under_nccl_semantics(tmp_path, probe, fid, culprits, where):
    r = ddpdoctor(["hang", "--timeout", "120", str(PROBES / probe)], tmp_path, timeout=150, env=SIM)
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
    r = ddpdoctor(["check", str(probe)], tmp_path, timeout=150, env=SIM)
    if r.report and any(f["id"].startswith("crash") or f["id"] == "hang.shape-mismatch" for f in r.report["findings"]):
        pytest.skip("gloo's background work aborted the rank before the run ended (timing)")
    f = finding(r.report, "collective.shape-mismatch")
    assert f["culprits"] == [0, 1] and r.code == 1
    assert lines_of(f, 0) == lines_of(f, 1) == {marker_line(probe, "GATHER")}


@pytest.mark.parametrize("aborted", [0, 1], ids=["the-extra-call's-rank-aborted", "the-other-rank-aborted"])
def test_ranks_ended_before_their_first_beat_in_the_loop_are_placed_by_the_size_mismatch_abort(tmp_path, aborted):
    """The record CI once got from trainer_async_save.py under the simulation: gloo aborted a rank on a
    size mismatch at position #14 (rank 0's rank-0-only all_reduce against rank 1's DDP all-reduce) and
    torchrun ended the other rank before it raised, finished or beat again; both ranks' last beats are
    from before the loop (position 0). The abort proves both were at #14 (rank 0's ledger has it; rank 1's
    has no Python collective there: a DDP all-reduce); the verdict is the divergence, not an unexplained
    crash, whichever of the two gloo aborted."""
    from builder import RunBuilder

    from ddpdoctor.analysis.registry import diagnose
    from ddpdoctor.record.reader import load_run

    probe = PROBES / "trainer_async_save.py"
    line = marker_line(probe, "EXTRA")
    run = tmp_path / "run"
    b = RunBuilder(run, script=str(probe))
    for r in (0, 1):
        b.start(r).hb(r, 0.5, 0, where=59)
    b.add(
        0,
        "ledger.jsonl",
        "coll",
        1.2,
        op="all_reduce",
        group="0",
        seq=[14, 14],
        shapes=[[1]],
        dtypes=["float32"],
        site=[str(probe), line, "_save"],
        st="issued",
    )
    b.add(0, "ledger.jsonl", "cend", 1.2, group="0", s0=14, s1=14, **{"async": True})
    other = 1 - aborted
    (run / "ranks" / str(aborted) / "fatal.txt").write_text(
        "Fatal Python error: Aborted\n\nThread 0x1 (most recent call first):\n  <no Python frame>\n"
    )
    (run / "ranks" / str(other) / "terminated.txt").write_text(
        "Current thread 0x2 (most recent call first):\n  <no Python frame>\n"
    )
    for r in (0, 1):
        log = run / "logs" / "x" / "attempt_0" / str(r)
        log.mkdir(parents=True)
        (log / "stderr.log").write_text(
            "terminate called after throwing an instance of 'gloo::EnforceNotMet'\n  what():  [enforce fail at "
            "pair.cc:456] op.preamble.length <= op.nbytes. 12 vs 4. Received data size doesn't match expected "
            "size. Is there a distributed collective mismatch in your code?\n"
            if r == aborted
            else ""
        )
    b.add(None, "monitor.jsonl", "exit", 1.5, returncode=1)
    rep = diagnose(load_run(str(run)), Config())
    f = next(f for f in rep.findings if f.severity == "error")
    assert f.id == "hang.rank-conditional-collective", [x.id for x in rep.findings]
    assert f.culprits == (0,)
    assert any(l.rank == 0 and l.line == line for l in f.locations)
    assert f.evidence["reached_by_abort"] == {"1": 14}
