"""Removing any part of the evidence never turns a non-OK verdict into OK (issue 50's property test).

Over the golden run directories of a finding (tests/golden/) and the flight-recorder dump sets of real gloo
jobs that are not OK (tests/data/fr/gloo/), each reduction takes one part away, at four grains: one file
deleted, one file cut in the middle of a line, one rank's whole records deleted (its folder; its dump and
its torchrun log folder), one entry dropped (a line of a jsonl or a log; one entry of a dump, written back
in the dump's own format). Each reduced copy is judged the way ``ddpdoctor analyze`` judges it, in process:
the verdict must not be OK and the exit code not 0 (a bad input, exit 2, is not OK). The lines dropped are
a sample with a fixed seed (every line of every file costs a minute); every file, cut, rank and dump entry is
taken. The rule this guards: a rank without records, a cut file or a dump with entries missing is named as
missing, never an OK.
"""

from __future__ import annotations

import json
import pickle
import random
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddpdoctor.analysis import diagnose
from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.wellformed import screen
from ddpdoctor.errors import DdpdoctorError
from ddpdoctor.postmortem import command as postmortem
from ddpdoctor.record.mirror import load_runs
from ddpdoctor.record.reader import RunDirError

TESTS = Path(__file__).resolve().parents[3]
GOLDEN = TESTS / "golden"
GLOO = TESTS / "data" / "fr" / "gloo"
# the golden run directories whose verdict is not OK (healthy and plateau_loaded read OK whole)
RUNS = (
    "rank_conditional",
    "size_abort",
    "cross_group",
    "mesh_tp_extra",
    "mesh_dp_skip",
    "fsdp2_flight_lost",
    "leak_graph",
    "check_set_epoch",
)
# the gloo dump sets of a fault (the others are healthy jobs, OK whole: test_every_other_dump_set_reads_ok)
FAULTS = (
    "busy",
    "dtype",
    "helper",
    "kill",
    "kill-fr-only",
    "moe-busy",
    "p2p",
    "pipe-busy",
    "pipe-extra",
    "raise-no-record",
    "size",
    "torch-extra-coalesced",
    "torch-extra-coalesced-json",
    "two-jobs",
    "zoo-extra",
)
LINES_PER_FILE = 4  # lines dropped per jsonl or log, sampled
SEED = 50
SKIP = {"README.md", "report.html"}  # no evidence: a note for people, a picture analyze writes


def _files(top: Path) -> list[Path]:
    return sorted(p.relative_to(top) for p in top.rglob("*") if p.is_file() and p.name not in SKIP)


def _dump(path: Path) -> tuple[str, dict] | None:
    """A flight-recorder dump's format and contents, or None for any other file."""
    data = path.read_bytes()
    try:
        d = pickle.loads(data)  # the test's own data: trusted
        fmt = "pickle"
    except Exception:
        try:
            d = json.loads(data)
            fmt = "json"
        except ValueError:
            return None
    return (fmt, d) if isinstance(d, dict) and isinstance(d.get("entries"), list) else None


def _lines(path: Path) -> list[int]:
    """The indices of a text record's non-blank lines (jsonl, logs); [] for any other file."""
    if path.suffix not in (".jsonl", ".log", ".txt"):
        return []
    return [i for i, line in enumerate(path.read_bytes().split(b"\n")) if line.strip()]


def _cut(path: Path) -> None:
    """Cut in the middle of the line that holds the file's middle byte (a writer killed mid-line)."""
    data = path.read_bytes()
    mid = len(data) // 2
    start = data.rfind(b"\n", 0, mid) + 1
    end = data.find(b"\n", mid)
    end = len(data) if end < 0 else end
    path.write_bytes(data[: start + max(1, (end - start) // 2)] if end > start else data[:mid])


def _rank_parts(case: Path, run: bool) -> dict[str, list[Path]]:
    """Per rank, what holds its records: ``ranks/<r>`` of a run directory; a dump set's ``*rank_<r>`` dumps
    and torchrun's ``logs/.../attempt_<n>/<r>`` folders."""
    if run:
        return {r.name: [r.relative_to(case)] for r in sorted((case / "ranks").iterdir())}
    out: dict[str, set[Path]] = {}
    for rel in _files(case):
        _, sep, tail = rel.name.rpartition("rank_")
        if sep and tail.isdigit():
            out.setdefault(tail, set()).add(rel)
        parts = rel.parts
        at = next((k for k, p in enumerate(parts) if p.startswith("attempt_")), None)
        if parts[0] == "logs" and at is not None and at + 1 < len(parts) - 1 and parts[at + 1].isdigit():
            out.setdefault(parts[at + 1], set()).add(Path(*parts[: at + 2]))
    return {r: sorted(v) for r, v in sorted(out.items())}


def _reductions(case: Path, run: bool) -> Iterator[tuple[str, object, int]]:
    """(grain, what, index): every file deleted and cut, every rank deleted, every dump entry dropped, and
    ``LINES_PER_FILE`` sampled lines of each text record dropped."""
    rng = random.Random(f"{SEED}-{case.name}")
    for rel in _files(case):
        yield "file", rel, 0
        yield "cut", rel, 0
        dump = _dump(case / rel)
        if dump is not None:
            for i in range(len(dump[1]["entries"])):
                yield "entry", rel, i
            continue
        lines = _lines(case / rel)
        for i in sorted(rng.sample(lines, min(LINES_PER_FILE, len(lines)))):
            yield "line", rel, i
    for parts in _rank_parts(case, run).values():
        yield "rank", parts, 0


def _apply(top: Path, grain: str, what: object, i: int) -> None:
    if grain == "rank":
        assert isinstance(what, list)
        for rel in what:
            p = top / rel
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        return
    assert isinstance(what, Path)
    p = top / what
    if grain == "file":
        p.unlink()
    elif grain == "cut":
        _cut(p)
    elif grain == "entry":
        dump = _dump(p)
        assert dump is not None
        fmt, d = dump
        del d["entries"][i]
        p.write_bytes(pickle.dumps(d) if fmt == "pickle" else json.dumps(d).encode())
    else:
        lines = p.read_bytes().split(b"\n")
        del lines[i]
        p.write_bytes(b"\n".join(lines))


def _analyze_run(top: Path) -> tuple[str, int, list[str]]:
    """``ddpdoctor analyze RUN_DIR`` in process (cli/analyze.py): the loaders, the screen of damaged records,
    the run's own --timeout; a record the loaders cannot read is bad input (exit 2)."""
    try:
        record = load_runs([str(top)])
    except (RunDirError, TypeError, ValueError, KeyError, AttributeError, IndexError):
        return "bad input", 2, []
    record, _ = screen(record)
    timeout = float(record.manifest.get("timeout") or 60.0)
    rep = diagnose(record, Config(timeout=timeout), str(record.manifest.get("command", "analyze")))
    return rep.verdict, rep.exit_code, [f.id for f in rep.findings if f.severity == "error"]


def _analyze_dumps(top: Path) -> tuple[str, int, list[str]]:
    """``ddpdoctor analyze DUMP_FOLDER`` in process (postmortem/command.py): bad input or nothing readable
    is exit 2."""
    try:
        rep, _ = postmortem.analyze([str(top)], "error")
    except DdpdoctorError:
        return "bad input", 2, []
    if rep is None:
        return "nothing to analyze", 2, []
    return rep.verdict, rep.exit_code, [f.id for f in rep.findings if f.severity == "error"]


def _check(case: Path, tmp_path: Path, run: bool) -> None:
    analyze = _analyze_run if run else _analyze_dumps
    whole = analyze(case)
    assert whole[0] != "ok" and whole[1] != 0 and whole[2], whole  # the premise: the whole evidence finds a fault
    bad, judged = [], 0
    for k, (grain, what, i) in enumerate(_reductions(case, run)):
        top = tmp_path / str(k)
        shutil.copytree(case, top)
        _apply(top, grain, what, i)
        got = analyze(top)
        if got[0] == "ok" or got[1] == 0:
            bad.append((grain, str(what), i, got))
        judged += grain == "entry" and got[0] != "bad input"
        shutil.rmtree(top)
    assert not bad, bad
    if not run:  # a dump with one entry dropped is still a well-formed dump: the judge reads it, not the loader
        entries = sum(g == "entry" for g, _, _ in _reductions(case, run))
        assert judged == entries, (judged, entries)


@pytest.mark.parametrize("name", RUNS)
def test_no_removal_from_a_golden_run_directory_reads_ok(name, tmp_path):
    _check(GOLDEN / name, tmp_path, run=True)


@pytest.mark.parametrize("name", FAULTS)
def test_no_removal_from_a_faulty_jobs_dumps_reads_ok(name, tmp_path):
    _check(GLOO / name, tmp_path, run=False)


def test_every_other_dump_set_reads_ok():
    """A dump set added to tests/data/fr/gloo is either a fault, and taken above, or a healthy job."""
    others = sorted(p for p in GLOO.iterdir() if p.is_dir() and p.name not in FAULTS)
    assert others
    assert {p.name: _analyze_dumps(p)[:2] for p in others} == {p.name: ("ok", 0) for p in others}


def test_a_dump_missing_its_pending_call_is_named(tmp_path):
    """The defect the property found: rank 0's dump of a hang (tests/data/fr/gloo/busy: rank 1 stalled in its
    data reader, rank 0 waits in all_reduce #4) with that pending entry dropped read OK, both rings ending
    at #3. Its pg_status still counts the call in flight: the dump is named as missing it."""
    top = tmp_path / "busy"
    shutil.copytree(GLOO / "busy", top)
    _apply(top, "entry", Path("rank_0"), 3)
    rep, _ = postmortem.analyze([str(top)], "error")
    assert rep is not None and rep.verdict != "ok" and rep.exit_code != 0
    (f,) = [f for f in rep.findings if f.severity == "error"]
    assert (f.id, f.culprits) == ("postmortem.no-dump", (0,))
    assert "in flight on group 0 (op 4" in f.message, f.message


def test_a_dump_with_a_sequence_id_skipped_is_named(tmp_path):
    """dtype: the ranks passed different dtypes to all_reduce #3; with rank 0's #3 dropped nothing disagreed
    and the dumps read OK. A group's sequence ids in one ring never skip one: the dump is named as missing it."""
    top = tmp_path / "dtype"
    shutil.copytree(GLOO / "dtype", top)
    _apply(top, "entry", Path("rank_0"), 2)
    rep, _ = postmortem.analyze([str(top)], "error")
    assert rep is not None and rep.verdict != "ok" and rep.exit_code != 0
    f = next(f for f in rep.findings if f.id == "postmortem.no-dump")
    assert f.culprits == (0,) and "#3 of group 0" in f.message, f.message
