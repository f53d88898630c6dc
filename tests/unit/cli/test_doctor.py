"""``ddpdoctor doctor``'s options, in-process: a bad value is one line and exit 2 before any health check or
self-test starts (run_doctor is replaced by one that records what it was given, so nothing runs)."""

from __future__ import annotations

import pytest

from ddpdoctor.cli import main
from ddpdoctor.errors import ExitCode


@pytest.fixture
def given(monkeypatch):
    """What doctor hands to run_doctor, instead of running it."""
    got: dict = {}

    def fake(only, runs_root, json_path, junit_path, **kw):
        got.update(only=only, runs_root=runs_root, json_path=json_path, junit_path=junit_path, **kw)
        return 0

    monkeypatch.setattr("ddpdoctor.health.selftest.run_doctor", fake)
    monkeypatch.setattr("ddpdoctor.cli.project.find_table", lambda start=None: (None, {}))
    return got


def _cli(capsys, *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as ex:
        main(["doctor", *argv])
    return int(ex.value.code or 0), capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--sizes", "64K,lots"], "--sizes: "),
        (["--backend", "mpi"], "'mpi' is not one of 'auto', 'gloo', 'nccl'"),
        (["--timeout", "0.5"], "--timeout"),
        (["--min-busbw", "-1"], "--min-busbw"),
        (["--fail-on", "never"], "--fail-on"),
        (["--ignore", "hang.timout"], "did you mean hang.timeout?"),
        (["--skip-probe"], "No such option '--skip-probe'"),
    ],
)
def test_a_bad_option_is_one_line_and_exit_2_and_nothing_runs(capsys, given, argv, words):
    code, err = _cli(capsys, *argv)
    assert code == ExitCode.USAGE and err.count("\n") == 1 and err.startswith("ddpdoctor: error: "), err
    assert words in err and "Traceback" not in err
    assert given == {}


def test_the_options_reach_the_doctor(capsys, given):
    code, _ = _cli(
        capsys,
        "--skip-probes",
        "--min-busbw",
        "12.5",
        "--sizes",
        "64K,1M",
        "--backend",
        "gloo",
        "--only",
        "crash.py",
        "--nproc-per-node",
        "2",
        "--select",
        "doctor",
    )
    assert code == 0
    assert given["only"] == ("crash.py",) and given["skip_probes"] and not given["skip_health"]
    assert (given["min_busbw"], given["sizes"], given["backend"], given["timeout"]) == (
        12.5,
        [2**16, 2**20],
        "gloo",
        60.0,
    )
    assert given["select"] == ("doctor",) and given["ignore"] == ()
    assert given["torchrun"]["nproc_per_node"] == "2"


def test_the_doctors_exit_code_is_the_commands(capsys, given, monkeypatch):
    monkeypatch.setattr("ddpdoctor.health.selftest.run_doctor", lambda *a, **k: 4)
    assert _cli(capsys, "--skip-probes")[0] == 4
