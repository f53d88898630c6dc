"""postmortem/command.py on real gloo flight-recorder dumps (tests/data/fr/gloo): run directories told
from other inputs, the rank-conditional call found with its rank and line, a damaged dump refused as
bad input (DdpdoctorError), nothing to judge without dumps, and --html written or refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from builder import RunBuilder

from ddpdoctor.errors import DdpdoctorError
from ddpdoctor.postmortem import command

GLOO = Path(__file__).resolve().parents[2] / "data" / "fr" / "gloo"


def test_split_keeps_run_directories_and_missing_paths_apart_from_dumps(tmp_path):
    run = RunBuilder(tmp_path / "run").root
    missing = tmp_path / "nope"
    runs, rest = command.split([str(run), str(GLOO / "helper"), str(missing)])
    assert runs == [str(run), str(missing)] and rest == [str(GLOO / "helper")]


def test_dumps_of_an_extra_call_on_rank_1_name_it_with_its_line():
    rep, run_dirs = command.analyze([str(GLOO / "helper")], "error")
    assert rep is not None and run_dirs == [] and (rep.verdict, rep.exit_code) == ("hang", 3)
    f = rep.findings[0]
    assert (f.id, f.culprits) == ("hang.rank-conditional-collective", (1,))
    assert "rank 1 made an extra all_reduce([8])" in f.message
    assert [(l.rank, l.file.rsplit("/", 1)[-1], l.line) for l in f.locations if l.role == "diverged"] == [
        (1, "frjob.py", 122)
    ]


def test_a_truncated_dump_is_refused_as_bad_input(tmp_path):
    data = (GLOO / "helper" / "rank_0").read_bytes()
    (tmp_path / "rank_0").write_bytes(data[: len(data) // 2])
    with pytest.raises(DdpdoctorError):
        command.analyze([str(tmp_path / "rank_0")], "error")


def test_run_directories_alone_give_no_post_mortem(tmp_path):
    run = str(RunBuilder(tmp_path / "run").root)
    assert command.analyze([run], "error") == (None, [run])


def test_with_html_writes_the_page_and_says_where(tmp_path):
    rep, _ = command.analyze([str(GLOO / "helper")], "error")
    assert command.with_html(rep, None) is rep
    out = command.with_html(rep, str(tmp_path / "r.html"))
    assert out.notes[-1] == f"HTML report: {tmp_path / 'r.html'}"
    assert "hang.rank-conditional-collective" in (tmp_path / "r.html").read_text()


def test_with_html_refuses_a_path_it_cannot_write(tmp_path):
    rep, _ = command.analyze([str(GLOO / "busy")], "error")
    with pytest.raises(DdpdoctorError, match="cannot write"):
        command.with_html(rep, str(tmp_path / "no" / "such" / "r.html"))


def test_a_copy_of_the_dumps_reads_the_same(tmp_path):
    shutil.copytree(GLOO / "busy", tmp_path / "busy")
    rep, _ = command.analyze([str(tmp_path / "busy")], "error")
    f = rep.findings[0]
    assert (f.id, f.culprits) == ("hang.timeout", (1,)) and "rank 0 waits for rank 1" in f.message
