"""cli.options: the options every run shares, and the script taken the way torchrun takes it: ddpdoctor's
options, the script, then the script's arguments.

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


# -- the shared options' values: a bad one is one line and exit 2, before anything starts -------------------


def _cli(capsys, *argv: str) -> tuple[int, str]:
    from ddpdoctor.cli import main

    with pytest.raises(SystemExit) as ex:
        main(list(argv))
    return int(ex.value.code or 0), capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, words",
    [
        (["hang", "--timeout", "0.1", "t.py"], "--timeout"),
        (["check", "--max-time", "0", "t.py"], "--max-time"),
        (["memleak", "--launch", "mpirun", "t.py"], "'mpirun' is not one of 'auto', 'torchrun', 'spawn'"),
        (["profile", "--fail-on", "info", "t.py"], "--fail-on"),
        (["hang", "--select", "hnag", "t.py"], "--select"),  # checked against the catalog before any launch
    ],
)
def test_a_bad_shared_option_is_one_line_and_exit_2(capsys, argv, words):
    code, err = _cli(capsys, *argv)
    assert code == ExitCode.USAGE and err.count("\n") == 1 and err.startswith("ddpdoctor: error: "), err
    assert words in err and "Traceback" not in err


def test_the_shared_defaults():
    _script, _args, opts = parse("hang", "t.py")
    assert (opts["timeout"], opts["launch"], opts["fail_on"], opts["max_time"], opts["run_dir"]) == (
        60.0,
        "auto",
        "error",
        None,
        None,
    )
    assert opts["select"] == () and opts["ignore"] == () and opts["json_path"] is None


def test_select_and_ignore_repeat():
    _s, _a, opts = parse("check", "--select", "hang", "--select", "crash,data", "--ignore", "seed", "t.py")
    assert opts["select"] == ("hang", "crash,data") and opts["ignore"] == ("seed",)  # split by cli.project


def test_the_probe_names_are_the_files_of_the_probes_folder():
    import importlib.util
    import os

    from ddpdoctor.cli.options import probe_names

    names = probe_names()
    spec = importlib.util.find_spec("ddpdoctor.probes")
    assert spec is not None and spec.submodule_search_locations
    folder = list(spec.submodule_search_locations)[0]
    assert "healthy" in names and names == sorted(names)
    assert all(os.path.isfile(os.path.join(folder, f"{n}.py")) for n in names)
    assert not [n for n in names if n.startswith("_")]


def test_script_alias_leaves_a_value_that_reads_like_the_option_alone():
    from ddpdoctor.cli.options import script_alias

    cmd = run_command(COMMANDS["hang"])
    # --run-dir takes a value: "--script" there is the folder's name, not the alias
    assert script_alias(cmd, ["--run-dir", "--script", "t.py"]) == ["--run-dir", "--script", "t.py"]
    assert script_alias(cmd, ["t.py", "--script", "u.py"]) == ["t.py", "--script", "u.py"]  # the script's own
