"""``ddpdoctor compare BASE NEW``, in-process through the CLI's entry point: the table and exit 1 on a step-time
or memory-growth regression, 0 without one, and bad input (a threshold, a file, a missing argument) one line
and exit 2, no traceback. (The library's tables: tests/unit/test_compare.py.)"""

from __future__ import annotations

import json

import pytest

from ddpdoctor.cli import main
from ddpdoctor.errors import ExitCode


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ex:
        main(["compare", *argv])
    cap = capsys.readouterr()
    return int(ex.value.code or 0), cap.out, cap.err


def _report(path, step_ms=None, memory=None) -> str:
    figures = {k: v for k, v in (("step_ms", step_ms), ("memory", memory)) if v is not None}
    path.write_text(json.dumps({"schema": "ddpdoctor.report", "version": 2, "command": "profile", "figures": figures}))
    return str(path)


def _steps(ms: float) -> dict:
    return {"0": {"step": ms, "forward": ms / 2}, "1": {"step": ms, "forward": ms / 2}}


def test_a_slower_step_over_the_threshold_is_exit_1(capsys, tmp_path):
    base, new = _report(tmp_path / "b.json", _steps(100.0)), _report(tmp_path / "n.json", _steps(120.0))
    code, out, err = _cli(capsys, base, new)  # the default threshold: 10 %
    assert code == ExitCode.FINDINGS and err == ""
    assert "REGRESSION (exit code 1)" in out.splitlines()[-1] and "rank 0 step 100.0 -> 120.0 ms (+20.0%)" in out
    code, out, _ = _cli(capsys, base, new, "--max-step-time-regression", "25")
    assert code == ExitCode.OK and out.splitlines()[-1] == "ddpdoctor compare: OK (exit code 0): no regression"


def test_memory_growth_over_the_threshold_is_exit_1(capsys, tmp_path):
    base = _report(tmp_path / "b.json", memory={"0": {"rss_bytes_per_step": 0}})
    new = _report(tmp_path / "n.json", memory={"0": {"rss_bytes_per_step": 2**20}})
    code, out, _ = _cli(capsys, base, new, "--max-memory-slope-regression", "512K")
    assert code == ExitCode.FINDINGS and "rank 0 rss growth 0 B -> 1.00 MiB per step" in out
    assert _cli(capsys, base, new, "--max-memory-slope-regression", "2M")[0] == ExitCode.OK


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--max-step-time-regression", "-5"], "--max-step-time-regression"),
        (["--max-step-time-regression", "ten"], "'ten' is not a valid float"),
        (["--max-memory-slope-regression", "lots"], "bad size 'lots' (e.g. 64K, 1M)"),
        (["--max-memory-slope-regression", "-1M"], "must not be negative"),
        (["--max-memory-slope-regression", "1M"], "both reports need memory figures"),  # profile reports only
    ],
)
def test_a_bad_threshold_is_one_line_and_exit_2(capsys, tmp_path, extra, words):
    base, new = _report(tmp_path / "b.json", _steps(100.0)), _report(tmp_path / "n.json", _steps(100.0))
    code, out, err = _cli(capsys, base, new, *extra)
    assert code == ExitCode.USAGE and out == "" and err.count("\n") == 1, err
    assert err.startswith("ddpdoctor: error: ") and words in err and "Traceback" not in err


def test_a_bad_file_or_a_missing_argument_is_one_line_and_exit_2(capsys, tmp_path):
    good = _report(tmp_path / "b.json", _steps(100.0))
    (tmp_path / "half.json").write_text('{"schema": ')
    cases = [
        ([good], "Missing argument 'NEW'"),
        ([good, str(tmp_path / "missing.json")], "cannot read"),
        ([good, str(tmp_path / "half.json")], "is not JSON"),
        ([good, _report(tmp_path / "empty.json")], "has no figures to compare"),
    ]
    for argv, words in cases:
        code, _out, err = _cli(capsys, *argv)
        assert code == ExitCode.USAGE and err.count("\n") == 1 and words in err, (argv, err)


@pytest.mark.parametrize("threshold", ["512K", "512KB", "512KiB", "0.5MiB", "0.5 MiB"])
def test_the_threshold_takes_the_units_compare_itself_writes(capsys, tmp_path, threshold):
    # compare prints "1.00 MiB per step": the same words are a threshold
    base = _report(tmp_path / "b.json", memory={"0": {"rss_bytes_per_step": 0}})
    new = _report(tmp_path / "n.json", memory={"0": {"rss_bytes_per_step": 2**20}})
    code, out, err = _cli(capsys, base, new, "--max-memory-slope-regression", threshold)
    assert code == ExitCode.FINDINGS and "REGRESSION (> +512.00 KiB/step)" in out, err
