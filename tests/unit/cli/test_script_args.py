"""The script taken the way torchrun takes it: ddpdoctor's options, the script, then the script's arguments.

In-process: the run commands' own click parsing (the one the CLI and ``doctor``'s self-test use), then
``split_script``; nothing is launched."""

from __future__ import annotations

import pytest

from ddpdoctor.cli.options import run_command, split_script
from ddpdoctor.commands import COMMANDS
from ddpdoctor.errors import DdpdoctorError, ExitCode


def parse(*argv: str) -> tuple[str, tuple[str, ...], dict]:
    """``ddpdoctor COMMAND ARGV...`` -> (script, its arguments, ddpdoctor's own option values)."""
    name, *rest = argv
    cmd = run_command(COMMANDS[name])
    params = dict(cmd.make_context(name, list(rest)).params)
    script, args = split_script(cmd, params)
    return script, args, params


def test_everything_after_the_script_is_the_scripts():
    script, args, opts = parse("hang", "train.py", "--epochs", "3", "--timeout", "5")
    assert (script, args) == ("train.py", ("--epochs", "3", "--timeout", "5"))
    assert opts["timeout"] == 60.0  # the script's --timeout, not ddpdoctor's


def test_options_before_the_script_are_ddpdoctors():
    script, args, opts = parse("check", "--epochs", "2", "--timeout", "9", "t.py", "--lr", "0.1")
    assert (script, args, opts["epochs"], opts["timeout"]) == ("t.py", ("--lr", "0.1"), 2, 9.0)


@pytest.mark.parametrize("alias", [["--script", "t.py"], ["--script=t.py"]])
def test_the_script_option_is_an_alias_with_the_same_rule(alias):
    # the trap of the issue: check's own --epochs silently took the script's
    script, args, opts = parse("check", "--steps", "4", *alias, "--epochs", "3")
    assert (script, args, opts["epochs"], opts["steps"]) == ("t.py", ("--epochs", "3"), None, 4)


def test_a_dash_dash_right_after_the_script_is_dropped_as_torchrun_drops_it():
    assert parse("hang", "t.py", "--", "--epochs", "3")[1] == ("--epochs", "3")
    assert parse("hang", "t.py", "a", "--", "b")[1] == ("a", "--", "b")  # torchrun keeps a later one
    assert parse("hang", "--timeout", "5", "--", "t.py", "-x")[:2] == ("t.py", ("-x",))


def test_no_script_is_one_usage_error_not_a_stand_in():
    with pytest.raises(DdpdoctorError) as e:
        parse("memleak", "--steps", "3")
    assert e.value.exit_code == ExitCode.USAGE and "no script" in str(e.value) and "--probe healthy" in str(e.value)


def test_a_built_in_probe_by_name_takes_the_positionals_as_its_arguments():
    script, args, _ = parse("check", "--steps", "3", "--probe", "healthy", "--", "--epochs", "1000")
    assert script.endswith("healthy.py") and args == ("--epochs", "1000")


def test_ddpdoctor_options_after_the_script_before_dash_dash_are_refused():
    # the form before torchrun's rule: --timeout would now reach the script; say so instead
    with pytest.raises(DdpdoctorError) as e:
        parse("hang", "--script", "t.py", "--timeout", "5", "--", "--epochs", "3")
    assert "--timeout comes after the script" in str(e.value)


def test_the_cli_says_one_line_and_exits_2_without_a_script(capsys):
    from ddpdoctor.cli import main

    with pytest.raises(SystemExit) as ex:
        main(["hang", "--timeout", "5"])
    err = capsys.readouterr().err
    assert ex.value.code == 2 and err.count("\n") == 1 and err.startswith("ddpdoctor: error: no script"), err


def test_an_unknown_probe_name_is_a_usage_error(capsys):
    from ddpdoctor.cli import main

    with pytest.raises(SystemExit) as ex:
        main(["hang", "--probe", "nope"])
    assert ex.value.code == 2 and "nope" in capsys.readouterr().err
