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
