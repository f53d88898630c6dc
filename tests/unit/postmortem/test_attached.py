"""postmortem/attached.py: the attach run directory's flight-recorder note and dump folder, and the one
judgement of the stacks and the dumps of one job as one evidence (the one policy asked of both cases; a changed
dump noted, never used)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ddpdoctor.analysis.findings import Finding, Location, Report
from ddpdoctor.postmortem import attached

GLOO = Path(__file__).resolve().parents[2] / "data" / "fr" / "gloo"
_TORCH = "/venv/lib/python3.11/site-packages/torch"
_ALLREDUCE = [
    [f"{_TORCH}/distributed/c10d_logger.py", 83, "wrapper"],
    [f"{_TORCH}/distributed/distributed_c10d.py", 3252, "all_reduce"],
]


def _attach_dir(tmp_path: Path, dumps: str | None = "helper", note: str = "2 dumps taken") -> Path:
    d = tmp_path / "attach"
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"command": "attach", "attach": {"fr": {"note": note}}}))
    (d / "fr").mkdir()
    if dumps:
        for f in (GLOO / dumps).iterdir():
            shutil.copy(f, d / "fr" / f.name)
    return d


def _stacks(*findings: Finding) -> Report:
    return Report("attach", "hang" if findings else "ok", 3 if findings else 0, "/runs/a", findings, notes=("s",))


def _rank_conditional(culprits: tuple[int, ...]) -> Finding:
    locs = (Location(1, "/w/frjob.py", 122, "helper", "diverged"), Location(0, "/w/frjob.py", 117, "main", "waiting"))
    return Finding("hang.rank-conditional-collective", "error", "from stacks", "h", (0, 1), locs, {}, culprits=culprits)


def test_fr_note_reads_only_an_attach_manifest(tmp_path):
    d = _attach_dir(tmp_path)
    assert attached.fr_note(str(d)) == "2 dumps taken"
    (d / "manifest.json").write_text(json.dumps({"command": "hang"}))
    assert attached.fr_note(str(d)) is None
    assert attached.fr_note(str(tmp_path / "missing")) is None


def test_fr_dirs_lists_only_folders_that_hold_dumps(tmp_path):
    full = _attach_dir(tmp_path)
    empty = _attach_dir(tmp_path / "e", dumps=None)
    assert attached.fr_dirs([str(full), str(empty)]) == [str(full / "fr")]


def _attach_run(tmp_path: Path, lines: dict[int, int], dumps: str = "helper"):
    """An attach run directory of tests/frjobs/frjob.py's two ranks, each blocked in an all_reduce at its
    line (py-spy's stacks: no move between the two looks), with the dumps of the same job in ``fr/``."""
    from builder import RunBuilder

    from ddpdoctor.analysis import diagnose
    from ddpdoctor.analysis.config import Config
    from ddpdoctor.record.reader import load_run

    d = _attach_dir(tmp_path, dumps)
    script = tmp_path / "job.py"  # the job as py-spy saw it: no rank test around either call
    script.write_text("import torch.distributed as dist\n" + "dist.all_reduce(x)\n" * 20)
    b = RunBuilder(
        tmp_path / "run",
        script=str(script),
        command="attach",
        attach={"interval": 1.0, "fr": {"note": "2 dumps taken"}},
    )
    for r, line in lines.items():
        b.add(r, "events.jsonl", "start", 1.0, pid=1000 + r, local_rank=r)
        b.add(r, "events.jsonl", "init", 1.0, world_size=2)
        stack = [[str(script), line, "<module>"], *_ALLREDUCE]
        threads = [{"main": True, "name": "MainThread", "stack": stack}]
        b.add(r, "stacks.jsonl", "stacks", 2.0, threads=threads, moved=False, cpu=0.0)
    run = tmp_path / "run"
    shutil.copytree(d / "fr", run / "fr")
    record = load_run(str(run))
    return record, diagnose(record, Config(), "attach"), str(run)


def test_the_dumps_and_the_stacks_are_judged_as_one_evidence(tmp_path):
    """rank 1's extra all_reduce through a helper (the dumps: an extra call on group 0 that rank 0 never
    made); the stacks show both ranks blocked in an all_reduce at different lines. One finding, from both."""
    record, stacks, run = _attach_run(tmp_path, {0: 3, 1: 7})
    alone = [f.id for f in stacks.findings if f.severity == "error"]
    out = attached.with_flight_recorder(stacks, [run], "error", record=record)
    errors = [f for f in out.findings if f.severity == "error"]
    assert [f.id for f in errors] == ["hang.rank-conditional-collective"], (alone, [f.message for f in errors])
    f = errors[0]
    assert f.culprits == (1,)
    assert "[stacks only]" not in f.message and "from the flight recorder" in f.message, f.message
    assert "stacks give each rank's line" in f.message  # where a rank has no line of the dumps (JSON), its stack's
    assert (out.verdict, out.exit_code, out.run_dir) == ("hang", 3, run)
    assert "2 dumps taken" in out.notes


def test_without_the_record_the_dumps_are_judged_beside_the_stacks_report(tmp_path):
    d = _attach_dir(tmp_path)
    out = attached.with_flight_recorder(_stacks(_rank_conditional((0,))), [str(d)], "error")
    got = [(f.id, f.culprits) for f in out.findings if f.id == "hang.rank-conditional-collective"]
    assert sorted(got) == [("hang.rank-conditional-collective", (0,)), ("hang.rank-conditional-collective", (1,))]


def test_a_dump_changed_after_attach_is_noted_and_not_used(tmp_path):
    d = _attach_dir(tmp_path)
    raw = (d / "fr" / "rank_0").read_bytes()
    (d / "fr" / "rank_0").write_bytes(raw[: len(raw) // 2])
    stacks = _stacks(_rank_conditional((1,)))
    out = attached.with_flight_recorder(stacks, [str(d)], "error")
    assert out.findings == stacks.findings
    assert any(n.startswith("the flight-recorder dumps were not used:") for n in out.notes), out.notes
