"""A property of every judgement here: taking evidence away never turns a non-OK verdict into OK.

Each real record set (the gloo jobs of tests/data/fr/gloo, healthy ones included, NVRx's 16-rank NCCL dumps, the golden run
directories of a hang, a leak and a check finding, gloo's size abort, a cross-group deadlock) is reduced one file at a time in three ways: the file
deleted, emptied, and cut in half. Every reduction must still end in a verdict other than OK (or in one
line of bad input, exit 2): a rank without records, an empty dump or a cut file is named as missing, never
dropped from the judgement.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ddpdoctor.analysis import diagnose
from ddpdoctor.analysis.config import Config
from ddpdoctor.postmortem import inputs, report
from ddpdoctor.record.reader import RunDirError, load_run

TESTS = Path(__file__).resolve().parents[2]
FR = TESTS / "data" / "fr"
GOLDEN = TESTS / "golden"
FR_CASES = sorted(p for p in (FR / "gloo").iterdir() if p.is_dir()) + sorted(
    p for p in (FR / "nvrx").iterdir() if p.is_dir()
)
# torch's matched analyzer cases (tests/frjobs/torchcases.py): healthy jobs, OK only while every dump is whole
HEALTHY = {
    "torch-matched",
    "torch-coalesced",
    "torch-broadcasts",
    "torch-uneven-rs",
    "moe-healthy",
    "zoo-healthy",
    "pipe-healthy",
}
RUN_CASES = [GOLDEN / n for n in ("rank_conditional", "leak_graph", "check_set_epoch", "size_abort", "cross_group")]
WAYS = ("deleted", "emptied", "cut")


def _reduce(path: Path, way: str) -> None:
    if way == "deleted":
        path.unlink()
    elif way == "emptied":
        path.write_bytes(b"")
    else:
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])


def _files(top: Path) -> list[Path]:
    return sorted(p.relative_to(top) for p in top.rglob("*") if p.is_file() and p.name != "README.md")


def _fr_exit(top: Path) -> tuple[str, int]:
    try:
        rep = report.build(inputs.load([str(top)]), Config())
    except inputs.InputError:
        return "bad input", 2
    return rep.verdict, rep.exit_code


def _run_exit(top: Path) -> tuple[str, int]:
    try:
        rep = diagnose(load_run(str(top)), Config(timeout=60.0))
    except RunDirError:
        return "bad input", 2
    return rep.verdict, rep.exit_code


@pytest.mark.parametrize("case", FR_CASES, ids=lambda p: f"{p.parent.name}-{p.name}")
def test_no_reduction_of_flight_recorder_evidence_reads_ok(case, tmp_path):
    full = _fr_exit(case)
    if case.name in HEALTHY:  # a healthy job reads OK whole; without a rank's dump it must not
        assert full == ("ok", 0), full
    else:
        assert full[0] != "ok" and full[1] != 0, full  # the premise: the whole evidence is not OK
    bad = []
    for rel in _files(case):
        for way in WAYS:
            top = tmp_path / f"{way}-{str(rel).replace('/', '_')}"
            shutil.copytree(case, top)
            _reduce(top / rel, way)
            got = _fr_exit(top)
            if got[0] == "ok" or got[1] == 0:
                bad.append((str(rel), way, got))
            shutil.rmtree(top)
    assert not bad, bad


@pytest.mark.parametrize("case", RUN_CASES, ids=lambda p: p.name)
def test_no_reduction_of_a_run_directory_reads_ok(case, tmp_path):
    full = _run_exit(case)
    assert full[0] != "ok" or full[1] != 0, full
    reductions = [(rel, way) for rel in _files(case) for way in WAYS] + [
        (Path("ranks") / r.name, "folder") for r in sorted((case / "ranks").iterdir())
    ]
    bad = []
    for rel, way in reductions:
        top = tmp_path / f"{way}-{str(rel).replace('/', '_')}"
        shutil.copytree(case, top)
        if way == "folder":
            shutil.rmtree(top / rel)
        else:
            _reduce(top / rel, way)
        got = _run_exit(top)
        if got[1] == 0:
            bad.append((str(rel), way, got))
        shutil.rmtree(top)
    assert not bad, bad
