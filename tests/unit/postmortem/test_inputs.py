"""postmortem.inputs.load: what the paths given to ``ddpdoctor analyze`` hold apart from run directories
(dumps, torchrun error files, logs with its summary, its log folder), on the records of real gloo jobs
(tests/data/fr/gloo); a path that is none of them is one InputError line. Pure."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest

from ddpdoctor.postmortem import inputs

DATA = Path(__file__).resolve().parents[2] / "data" / "fr" / "gloo"


def test_a_folder_with_a_dump_torchruns_log_folder_and_its_console():
    got = inputs.load([str(DATA / "kill")])
    assert set(got.dumps) == {0} and got.dumps[0].fmt == "pickle"
    assert got.local_ranks == {0: {0, 1}}  # attempt_0/0 and attempt_0/1
    assert [(e.rank, e.path.endswith("error.json")) for e in got.errors if e.path.endswith("error.json")] == [(0, True)]
    assert {(s.rank, s.root_cause) for s in got.summaries} == {(0, False), (1, True)}
    assert got.run_dirs == [] and not got.empty() and got.paths == [str(DATA / "kill")]


def test_console_tracebacks_without_error_files(tmp_path):
    got = inputs.load([str(DATA / "raise-no-record")])
    assert got.dumps == {} and got.local_ranks == {0: {0, 1}}
    raised = [e for e in got.errors if e.message == "RuntimeError: loss is nan at step 3"]
    assert raised and {e.rank for e in raised} == {1}


def test_a_run_directory_is_left_to_the_run_loader(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "manifest.json").write_text("{}")
    shutil.copy(DATA / "kill" / "rank_0", tmp_path / "rank_0")
    got = inputs.load([str(tmp_path)])
    assert got.run_dirs == [str(tmp_path / "run")] and set(got.dumps) == {0}
    assert inputs.load([str(tmp_path / "run")]).run_dirs == [str(tmp_path / "run")]


def test_a_dump_still_being_written_is_passed_over(tmp_path):
    shutil.copy(DATA / "kill" / "rank_0", tmp_path / "rank_0")
    (tmp_path / "rank_1.tmp").write_bytes(b"\x80\x04trunc")
    assert set(inputs.load([str(tmp_path)]).dumps) == {0}


def test_the_same_rank_twice_keeps_the_dump_with_stacks_and_says_so(tmp_path):
    src = DATA / "kill" / "rank_0"
    shutil.copy(src, tmp_path / "a_0")
    raw = pickle.loads(src.read_bytes())  # torch's own dump: plain data
    for e in raw["entries"]:
        e["frames"] = []
    (tmp_path / "b_0").write_bytes(pickle.dumps(raw))
    got = inputs.load([str(tmp_path)])
    assert got.dumps[0].path == str(tmp_path / "a_0") and got.dumps[0].stacks
    assert got.duplicates == [(0, str(tmp_path / "a_0"), str(tmp_path / "b_0"), True)]


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda d: d / "nowhere", "no such file or folder"),
        (lambda d: (d / "empty").mkdir() or d / "empty", "not a ddpdoctor run directory (no manifest.json)"),
        (lambda d: (d / "notes.md").write_text("hi") and d / "notes.md", "not a flight-recorder dump"),
        (lambda d: (d / "cfg.json").write_text('{"lr": 1}') and d / "cfg.json", "a JSON file that is neither"),
        (lambda d: (d / "rank_3").write_bytes(b"\x80\x04\x95trunc") and d / "rank_3", "truncated or broken pickle"),
        (lambda d: (d / "error.json").write_text('{"message": {"m') and d / "error.json", "a JSON file that is"),
    ],
)
def test_an_unknown_or_broken_path_is_one_input_error_line(tmp_path, make, words):
    path = make(tmp_path)
    with pytest.raises(inputs.InputError) as e:
        inputs.load([str(path)])
    assert words in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith(str(path))


def test_a_broken_error_file_in_a_folder_stops_the_analysis(tmp_path):
    folder = tmp_path / "logs" / "attempt_0" / "0"
    folder.mkdir(parents=True)
    (folder / "error.json").write_text(json.dumps({"message": 5}))
    with pytest.raises(inputs.InputError, match="not a torchrun error file"):
        inputs.load([str(tmp_path)])


def test_the_collector_is_back_on_after_a_load_that_failed():
    import gc

    assert gc.isenabled()
    with pytest.raises(inputs.InputError):
        inputs.load(["/nonexistent/ddpdoctor/path"])
    assert gc.isenabled()


def _job(folder: Path, ranks: int) -> list[str]:
    """``ranks`` copies of a real gloo dump (each under its own rank), as the files of one job."""
    folder.mkdir(exist_ok=True)
    src = (DATA / "kill" / "rank_0").read_bytes()
    for r in range(ranks):
        (folder / f"rank_{r}").write_bytes(src)
    return [str(folder / f"rank_{r}") for r in range(ranks)]


def test_a_pool_of_workers_reads_the_same_dumps_as_this_process(tmp_path):
    paths = _job(tmp_path / "job", 8)
    alone, pooled = inputs.read_dumps(paths, workers=0), inputs.read_dumps(paths, workers=2)
    assert [why for _, why in pooled] == [""] * 8
    for (a, _), (b, _) in zip(alone, pooled):
        assert a is not None and b is not None
        assert (a.rank, a.path, a.entries, a.pg_status, a.pg_ranks, a.stacks) == (
            b.rank,
            b.path,
            b.entries,
            b.pg_status,
            b.pg_ranks,
            b.stacks,
        )
        assert (a.open_index, a.op_units, a.enqueued("0")) == (b.open_index, b.op_units, b.enqueued("0"))


def test_a_large_job_is_read_by_workers_and_its_first_broken_dump_is_the_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(inputs, "POOL_FILES", 4)
    monkeypatch.setattr(inputs, "POOL_BYTES", 0)
    paths = _job(tmp_path / "job", 12)
    assert sorted(inputs.load([str(tmp_path / "job")]).dumps) == list(range(12))
    Path(paths[5]).write_bytes(b"\x80\x04\x95trunc")
    Path(paths[9]).write_bytes(b"\x80\x04\x95trunc")
    with pytest.raises(inputs.InputError) as e:
        inputs.load([str(tmp_path / "job")])
    assert str(e.value).startswith(paths[5] + ":") and "\n" not in str(e.value)


def test_a_broken_dump_found_before_a_broken_error_file_is_the_one_reported(tmp_path):
    # the dumps are read after the walk: a broken dump met first is still the one line, as when read on sight
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "rank_0").write_bytes(b"\x80\x04\x95trunc")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "error.json").write_text('{"message": {"m')
    with pytest.raises(inputs.InputError, match="truncated or broken pickle"):
        inputs.load([str(tmp_path / "a"), str(tmp_path / "b" / "error.json")])
    with pytest.raises(inputs.InputError, match="a JSON file that is"):
        inputs.load([str(tmp_path / "b" / "error.json"), str(tmp_path / "a")])
