"""torch's flight recorder as the rank's record (issue 54), with real gloo ranks: an FSDP2 job whose
collectives (``all_gather_single``, ``reduce_scatter_single``) the tool's wrappers never see is judged on the
recorder's entries, each rank's ``flight.json`` is JSON in the shape of torch's own dump with its frames, and
a recorder switched off leaves the rank to the wrappers, said in the report."""

from __future__ import annotations

import json

import pytest
from frjobs.jobs import dumped, run_job
from helpers import ROOT, TESTS, ddpdoctor, finding, marker_line

FSDP2 = TESTS / "scripts" / "fsdp2_faults.py"
FSDP2_JOB = TESTS / "frjobs" / "fsdp2job.py"  # the same shapes under plain torchrun, dumped by its own watchdog


def _run(tmp_path, fault: str, env: dict | None = None, script=FSDP2, extra: tuple = ()):
    args = ["hang", "--timeout", "40", str(script)]
    if script == FSDP2:
        args += ["--fault", fault]
    return ddpdoctor([*args, *extra], tmp_path, timeout=240, env=env)


def _roles(f: dict, role: str) -> set[tuple[int, int]]:
    return {(l["rank"], l["line"]) for l in f["locations"] if l["role"] == role}


def test_fsdp2_rank_that_skips_a_block_is_the_culprit_at_its_forward_line(tmp_path):
    r = _run(tmp_path, "skip")
    assert r.code == 3, r.out + r.err[-3000:]
    f = finding(r.report, "hang.rank-conditional-collective")
    assert f["culprits"] == [1], f["message"]
    assert (1, marker_line(FSDP2, "FORWARD")) in _roles(f, "skipped here"), f["locations"]
    assert "transport-stall" not in r.out and "hang.timeout" not in r.out
    # each rank's flight record: torch's dump shape, as JSON, with the frames
    for rank in (0, 1):
        dump = json.loads((r.run_dir / "ranks" / str(rank) / "flight.json").read_text())
        assert {"version", "pg_status", "entries"} <= dump.keys()
        assert dump["ddpdoctor"]["rank"] == rank
        names = {e["frames"][0]["name"] for e in dump["entries"] if e.get("frames")}
        assert "all_gather_single" in names, names  # FSDP2's own call, seen by the recorder only


@pytest.mark.extended
def test_fsdp2_healthy_is_ok(tmp_path):
    r = _run(tmp_path, "none")
    assert r.code == 0, r.out + r.err[-3000:]
    assert r.report["verdict"] == "ok"
    assert not [f for f in r.report["findings"] if f["severity"] == "error"]


@pytest.mark.extended
def test_fsdp2_rank0_metric_all_reduce_is_the_culprit_at_its_line(tmp_path):
    r = _run(tmp_path, "metric")
    assert r.code == 3, r.out + r.err[-3000:]
    f = finding(r.report, "hang.rank-conditional-collective")
    assert f["culprits"] == [0], f["message"]
    assert _roles(f, "diverged") == {(0, marker_line(FSDP2, "METRIC"))}


@pytest.mark.extended
def test_fsdp2_crash_names_the_rank_and_its_line(tmp_path):
    r = _run(tmp_path, "crash")
    assert r.code == 1, r.out + r.err[-3000:]
    f = finding(r.report, "crash.exception")
    assert f["culprits"] == [1], f["message"]
    assert (1, marker_line(FSDP2, "CRASH")) in _roles(f, "raised")


@pytest.mark.extended
def test_recorder_off_falls_back_to_the_wrappers_and_says_so(tmp_path):
    probe = ROOT / "probes" / "rank_conditional.py"
    r = _run(tmp_path, "", env={"TORCH_FR_BUFFER_SIZE": "0"}, script=probe)
    assert r.code == 3, r.out + r.err[-3000:]
    f = finding(r.report, "hang.rank-conditional-collective")
    assert f["culprits"] == [0], f["message"]
    assert not list(r.run_dir.glob("ranks/*/flight.json"))
    assert any("flight recorder was not read" in n and "TORCH_FR_BUFFER_SIZE" in n for n in r.report["notes"])


@pytest.mark.extended
@pytest.mark.parametrize("case,culprit,marker", [("skip", 1, "SKIPPED"), ("metric", 0, "METRIC")])
def test_fsdp2_faults_from_the_jobs_own_dumps(tmp_path, case, culprit, marker):
    """The job never ran under ddpdoctor: its watchdog dumped torch's recorder (pickle and JSON). The culprit
    from either format; its line only from the pickle, which has the frames."""
    for attempt in range(2):  # the dumps race the agent's end of the job: one rerun on a lost race
        out = run_job(case, tmp_path / f"{case}-{attempt}", job=FSDP2_JOB)
        if dumped(out) == {0, 1}:
            break
    assert dumped(out) == {0, 1}, (out / "torchrun.log").read_text()[-2000:]
    for fmt in ("fr", "json"):
        r = ddpdoctor(["analyze", str(out / fmt)], tmp_path)
        assert r.code == 3, r.out + r.err
        f = finding(r.report, "hang.rank-conditional-collective")
        assert f["culprits"] == [culprit], f["message"]
        lines = {l["line"] for l in f["locations"] if l["rank"] == culprit}
        if fmt == "fr":
            assert marker_line(FSDP2_JOB, marker) in lines, f["locations"]


# DDPDOCTOR_COLLECTIVES=recorder (the default since stop 59, named here so that these tests keep testing it): the ops
# torch's recorder records leave the wrappers (rank/collectives.py hand_off); the verdicts stand on the recorder's
# entries alone
RECORDER = {"DDPDOCTOR_COLLECTIVES": "recorder"}


def _ledger_ops(run_dir, rank: int) -> list[str]:
    path = run_dir / "ranks" / str(rank) / "ledger.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(x).get("op") for x in lines if x.strip() and '"op"' in x]


@pytest.mark.extended
@pytest.mark.parametrize(
    "script,fault,culprit,role,marker",
    [
        (FSDP2, "skip", 1, "skipped here", "FORWARD"),
        (FSDP2, "metric", 0, "diverged", "METRIC"),
        (ROOT / "probes" / "rank_conditional.py", "", 0, "diverged", "EXTRA"),
    ],
    ids=["fsdp2-skip", "fsdp2-metric", "ddp-rank-conditional"],
)
def test_recorder_alone_names_the_culprit_and_its_line(tmp_path, script, fault, culprit, role, marker):
    r = _run(tmp_path, fault, env=RECORDER, script=script)
    assert r.code == 3, r.out + r.err[-3000:]
    f = finding(r.report, "hang.rank-conditional-collective")
    assert f["culprits"] == [culprit], f["message"]
    assert marker_line(script, marker) in {line for rank, line in _roles(f, role) if rank == culprit}, f["locations"]
    for rank in (0, 1):
        init = next(
            json.loads(x)
            for x in (r.run_dir / "ranks" / str(rank) / "events.jsonl").read_text().splitlines()
            if '"kind":"init"' in x.replace(" ", "")
        )
        assert "all_reduce" in init["recorded"] and "send" not in init["recorded"]
        # the wrappers passed the recorded ops through: nothing of theirs in the ledger
        assert not {"all_reduce", "broadcast", "barrier"} & set(_ledger_ops(r.run_dir, rank))


@pytest.mark.extended
def test_recorder_alone_keeps_the_wrappers_for_gloos_p2p(tmp_path):
    probe = ROOT / "probes" / "recv_deadlock.py"
    r = _run(tmp_path, "", env=RECORDER, script=probe)
    assert r.code == 3, r.out + r.err[-3000:]
    f = finding(r.report, "hang.p2p-deadlock")
    assert marker_line(probe, "WAIT") in {l["line"] for l in f["locations"]}, f["locations"]
    assert "irecv" in {op for rank in (0, 1) for op in _ledger_ops(r.run_dir, rank)}
