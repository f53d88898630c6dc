"""``ddpdoctor attach``'s options, in-process: a bad value is one line and exit 2 before any job is looked for
(attach.session.attach is replaced by one that records its arguments, so no py-spy runs)."""

from __future__ import annotations

import pytest

from ddpdoctor.cli import main
from ddpdoctor.errors import ExitCode


@pytest.fixture
def given(monkeypatch):
    got: dict = {}

    def fake(pid, run_dir, interval, timeout, native, several_ok, fr_timeout):
        got.update(
            pid=pid,
            run_dir=run_dir,
            interval=interval,
            timeout=timeout,
            native=native,
            several_ok=several_ok,
            fr_timeout=fr_timeout,
        )
        return []  # no job attached to: nothing to report

    monkeypatch.setattr("ddpdoctor.attach.session.attach", fake)
    monkeypatch.setattr("ddpdoctor.cli.project.find_table", lambda start=None: (None, {}))
    return got


def _cli(capsys, *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as ex:
        main(["attach", *argv])
    return int(ex.value.code or 0), capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--pid", "abc"], "'abc' is not a valid integer"),
        (["--interval", "0.01"], "--interval"),
        (["--interval", "61"], "--interval"),
        (["--fr-timeout", "601"], "--fr-timeout"),
        (["--timeout", "0"], "--timeout"),
        (["--select", "hnag"], "--select"),
        (["--fail-on", "fatal"], "--fail-on"),
    ],
)
def test_a_bad_option_is_one_line_and_exit_2_and_no_job_is_touched(capsys, given, argv, words):
    code, err = _cli(capsys, *argv)
    assert code == ExitCode.USAGE and err.count("\n") == 1 and err.startswith("ddpdoctor: error: "), err
    assert words in err and "Traceback" not in err
    assert given == {}


def test_the_defaults_reach_the_session(capsys, given):
    assert _cli(capsys)[0] == 0
    assert given == {
        "pid": None,
        "run_dir": None,
        "interval": 1.0,
        "timeout": 10.0,
        "native": True,
        "several_ok": True,
        "fr_timeout": 15.0,
    }


def test_a_report_file_means_one_job_and_no_fr_means_no_flight_recorder(capsys, given, tmp_path):
    out = tmp_path / "r.json"
    assert _cli(capsys, "--pid", "4242", "--no-native", "--no-fr", "--json", str(out), "--interval", "2")[0] == 0
    assert (given["pid"], given["native"], given["fr_timeout"], given["several_ok"], given["interval"]) == (
        4242,
        False,
        None,
        False,
        2.0,
    )
