"""Bad input gets one clear line and its documented exit code, never a traceback from ddpdoctor."""

from __future__ import annotations

import json
import os

import pytest
from helpers import ddpdoctor


def one_line_error(r, code, text):
    assert r.code == code, (r.code, r.err[-2000:])
    mine = [ln for ln in r.err.splitlines() if ln.startswith("ddpdoctor: error:")]
    assert len(mine) == 1 and text in mine[0], r.err
    assert "Traceback" not in r.err and "Traceback" not in r.out


def test_missing_script(tmp_path):
    one_line_error(ddpdoctor(["hang", "nope.py"], tmp_path), 2, "script not found: nope.py")


def test_syntax_error_names_file_and_line(tmp_path):
    (tmp_path / "bad.py").write_text("import torch\nx = (\n")
    one_line_error(ddpdoctor(["hang", "bad.py"], tmp_path), 2, "bad.py:2: SyntaxError")


@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_bad_nproc(tmp_path, value):
    one_line_error(
        ddpdoctor(["hang", "--probe", "healthy", "--nproc-per-node", value], tmp_path), 2, "--nproc-per-node"
    )


def test_an_unknown_collectives_mode_is_one_line_before_running(tmp_path):
    r = ddpdoctor(["hang", "--probe", "healthy"], tmp_path, env={"DDPDOCTOR_COLLECTIVES": "recorderr"})
    one_line_error(r, 2, "DDPDOCTOR_COLLECTIVES=recorderr: expected recorder (the default")


def test_unknown_option(tmp_path):
    one_line_error(ddpdoctor(["hang", "--no-such-option"], tmp_path), 2, "No such option")


def test_unwritable_run_dir(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.access(locked, os.W_OK):  # root ignores permissions: use a path under a file instead
        (tmp_path / "afile").write_text("")
        target = tmp_path / "afile" / "run"
    else:
        target = locked / "run"
    (tmp_path / "x.py").write_text("")
    r = ddpdoctor(["hang", "x.py"], tmp_path, run_dir=target, json_report=False)
    one_line_error(r, 2, "cannot create run directory")


def test_script_exiting_1_before_init(tmp_path):
    (tmp_path / "early.py").write_text("import sys\nprint('leaving early')\nsys.exit(1)\n")
    r = ddpdoctor(["hang", "early.py"], tmp_path)
    assert r.code == 4, r.err[-2000:]
    assert r.report["findings"][0]["id"] == "run.failed-before-init"
    assert "exited with code 1 before init_process_group" in r.out
    assert "leaving early" in r.out  # the user's own output is not lost
    assert "Traceback" not in r.err


def test_script_raising_before_init_shows_its_line(tmp_path):
    (tmp_path / "cfg.py").write_text("import os\n\nraise RuntimeError('missing config')\n")
    r = ddpdoctor(["hang", "cfg.py"], tmp_path)
    assert r.code == 4
    f = r.report["findings"][0]
    assert f["id"] == "run.failed-before-init"
    assert f["locations"][0]["line"] == 3
    assert "RuntimeError" in f["message"]


def test_script_that_never_initialises_distributed(tmp_path):
    (tmp_path / "plain.py").write_text("print('single process')\n")
    r = ddpdoctor(["hang", "plain.py"], tmp_path)
    assert r.code == 2
    assert r.report["findings"][0]["id"] == "run.no-distributed"
    assert "single process" in r.out


def test_analyze_missing_foreign_truncated_and_future_run_dirs(tmp_path):
    one_line_error(ddpdoctor(["analyze", str(tmp_path / "none")], tmp_path), 2, "no such run directory")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "manifest.json").write_text(json.dumps({"name": "something else"}))
    one_line_error(ddpdoctor(["analyze", str(foreign)], tmp_path), 2, "not a ddpdoctor run manifest")
    trunc = tmp_path / "trunc"
    trunc.mkdir()
    (trunc / "manifest.json").write_text('{"schema": "ddpdoctor.run", "vers')
    one_line_error(ddpdoctor(["analyze", str(trunc)], tmp_path), 2, "truncated manifest")
    future = tmp_path / "future"
    future.mkdir()
    (future / "manifest.json").write_text(json.dumps({"schema": "ddpdoctor.run", "version": 99}))
    one_line_error(ddpdoctor(["analyze", str(future)], tmp_path), 2, "version 99")
    empty = tmp_path / "empty"
    empty.mkdir()
    one_line_error(ddpdoctor(["analyze", str(empty)], tmp_path), 2, "not a ddpdoctor run directory")


def test_unwritable_json_path_is_refused_before_running(tmp_path):
    r = ddpdoctor(
        ["hang", "--probe", "healthy", "--json", str(tmp_path / "no" / "dir" / "r.json")], tmp_path, json_report=False
    )
    one_line_error(r, 2, "cannot write")
