"""``--select``/``--ignore ID`` (ruff's rule) and a project's ``[tool.ddpdoctor]`` defaults, on ``analyze`` of
a recorded run (tests/golden: a healthy check run with the note seed.identical-streams, and a hang)."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import ROOT

from ddpdoctor.analysis.catalog import selected
from ddpdoctor.cli import main

GOLDEN = ROOT / "tests" / "golden"


@pytest.mark.parametrize(
    "fid, select, ignore, kept",
    [
        ("seed.identical-streams", (), (), True),
        ("seed.identical-streams", (), ("seed.identical-streams",), False),
        ("seed.identical-streams", (), ("seed",), False),
        ("crash.exception", ("hang",), (), False),  # crash is a family of its own, not hang's
        ("crash.abnormal-exit", ("crash",), ("crash.abnormal-exit",), False),  # the more specific wins
        ("hang.timeout", ("hang.timeout",), ("hang",), True),
        ("hang.timeout", ("hang",), ("hang",), False),  # as specific: the ignore wins
    ],
)
def test_ruffs_rule(fid, select, ignore, kept):
    assert selected(fid, select, ignore) is kept


def analyze(capsys, tmp_path, name: str, *argv: str) -> tuple[int, dict | None, str]:
    run = tmp_path / name
    if not run.exists():
        shutil.copytree(GOLDEN / name, run)  # analyze writes report.html into the run directory
    out = tmp_path / "r.json"
    out.unlink(missing_ok=True)
    with pytest.raises(SystemExit) as ex:
        main(["analyze", str(run), "--json", str(out), *argv])
    err = capsys.readouterr().err
    return int(ex.value.code or 0), (json.loads(out.read_text()) if out.exists() else None), err


def ids(report: dict) -> list[str]:
    return [f["id"] for f in report["findings"]]


def test_ignore_leaves_a_note_out_and_says_so(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, rep, _ = analyze(capsys, tmp_path, "healthy")
    assert code == 0 and ids(rep) == ["seed.identical-streams"]
    code, rep, _ = analyze(capsys, tmp_path, "healthy", "--ignore", "seed.identical-streams")
    assert code == 0 and ids(rep) == []
    assert "left out by --select/--ignore: seed.identical-streams" in rep["notes"]


def test_the_verdict_is_the_kept_findings(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, rep, _ = analyze(capsys, tmp_path, "rank_conditional")
    assert code == 3 and rep["verdict"] == "hang"
    code, rep, _ = analyze(capsys, tmp_path, "rank_conditional", "--select", "crash,memleak")
    assert code == 0 and rep["verdict"] == "ok" and ids(rep) == []


def test_the_projects_table_gives_the_defaults(capsys, tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.ddpdoctor]\nignore = ["seed"]\n')
    sub = tmp_path / "src" / "deep"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)  # the nearest pyproject.toml above the working directory
    code, rep, _ = analyze(capsys, tmp_path, "healthy")
    assert code == 0 and ids(rep) == []
    # --select replaces the table's select; --ignore adds to its ignore
    code, rep, _ = analyze(capsys, tmp_path, "healthy", "--select", "seed.identical-streams")
    assert ids(rep) == ["seed.identical-streams"]


@pytest.mark.parametrize(
    "table, line",
    [
        ('[tool.ddpdoctor]\nignor = ["seed"]\n', "[tool.ddpdoctor] has no key 'ignor' (keys: select, ignore)"),
        ('[tool.ddpdoctor]\nignore = ["sed"]\n', "ignore: sed: no such finding id or family (did you mean seed?)"),
        ('[tool.ddpdoctor]\nignore = "seed"\n', "[tool.ddpdoctor] ignore must be a list of finding ids"),
        ("[tool.ddpdoctor\n", "not valid TOML"),
    ],
)
def test_a_bad_table_is_one_line_and_exit_2(capsys, tmp_path, monkeypatch, table, line):
    (tmp_path / "pyproject.toml").write_text(table)
    monkeypatch.chdir(tmp_path)
    code, rep, err = analyze(capsys, tmp_path, "healthy")
    assert code == 2 and rep is None
    assert err.count("\n") == 1 and err.startswith("ddpdoctor: error: ") and line in err, err


def test_an_unknown_name_on_the_command_line_is_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = analyze(capsys, tmp_path, "healthy", "--ignore", "seed.identical-stream")
    assert code == 2 and "did you mean seed.identical-streams?" in err
