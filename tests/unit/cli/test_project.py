"""cli.project: a project's ``[tool.ddpdoctor]`` table (the nearest pyproject.toml that has one, from the
working directory up) and ``--select``/``--ignore ID`` merged with it; directly, then on ``analyze`` of a
recorded run (tests/golden: a healthy check run with the note seed.identical-streams, and a hang)."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import ROOT

from ddpdoctor.cli import main
from ddpdoctor.cli.project import find_table, selection
from ddpdoctor.errors import DdpdoctorError, ExitCode

GOLDEN = ROOT / "tests" / "golden"


def test_the_nearest_table_wins_and_a_pyproject_without_one_is_passed_over(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.ddpdoctor]\nselect = ["hang"]\n')
    mid = tmp_path / "mid"
    (mid / "leaf").mkdir(parents=True)
    (mid / "pyproject.toml").write_text('[project]\nname = "x"\n')  # no table: look further up
    path, table = find_table(str(mid / "leaf"))
    assert (path, table) == (str(tmp_path / "pyproject.toml"), {"select": ["hang"]})
    (mid / "pyproject.toml").write_text('[tool.ddpdoctor]\nignore = ["seed"]\n')
    assert find_table(str(mid / "leaf")) == (str(mid / "pyproject.toml"), {"ignore": ["seed"]})


def test_no_table_anywhere_is_no_defaults(tmp_path, monkeypatch):
    monkeypatch.setattr("os.path.isfile", lambda p: False)  # not even one above tmp_path
    assert find_table(str(tmp_path)) == (None, {})
    monkeypatch.undo()
    monkeypatch.setattr("ddpdoctor.cli.project.find_table", lambda start=None: (None, {}))
    assert selection(("hang,crash", " data "), ("seed.identical-streams",)) == (
        ("hang", "crash", "data"),
        ("seed.identical-streams",),
    )


def test_select_replaces_the_tables_and_ignore_adds_to_it_once(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.ddpdoctor]\nselect = ["hang"]\nignore = ["seed", "perf"]\n')
    assert selection(start=str(tmp_path)) == (("hang",), ("seed", "perf"))
    assert selection(("crash",), ("perf,memleak",), start=str(tmp_path)) == (("crash",), ("seed", "perf", "memleak"))


def test_a_table_that_is_not_a_table_is_a_usage_error(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool]\nddpdoctor = "hang"\n')
    with pytest.raises(DdpdoctorError) as e:
        find_table(str(tmp_path))
    assert e.value.exit_code == ExitCode.USAGE and str(e.value).endswith("[tool.ddpdoctor] must be a table")


def test_an_unknown_name_from_the_command_line_is_named_with_its_option(tmp_path):
    with pytest.raises(DdpdoctorError, match="--select") as e:
        selection(("hnag",), start=str(tmp_path))
    assert "\n" not in str(e.value) and "hnag" in str(e.value)


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
