"""cli.options: the options every run shares, and the script taken the way torchrun takes it: ddpdoctor's
options, the script, then the script's arguments.

In-process: the run commands' own click parsing (the one the CLI and ``doctor``'s self-test use), then
launch.command's ``split_script``; nothing is launched."""

from __future__ import annotations

import pytest

from ddpdoctor.cli.options import run_command
from ddpdoctor.commands import COMMANDS
from ddpdoctor.errors import DdpdoctorError, ExitCode
from ddpdoctor.launch.command import split_script


def parse(*argv: str) -> tuple[str, tuple[str, ...], dict]:
    """``ddpdoctor COMMAND ARGV...`` -> (script, its arguments, ddpdoctor's own option values)."""
    return parse_noted(*argv)[:3]  # type: ignore[return-value]


def parse_noted(*argv: str) -> tuple[str, tuple[str, ...], dict, list[str]]:
    """As parse, with the tokens after the script that the CLI says are ddpdoctor's names passed on."""
    name, *rest = argv
    cmd = run_command(COMMANDS[name])
    ctx = cmd.make_context(name, list(rest))
    params = dict(ctx.params)
    script, args = split_script(name, params)
    return script, args, params, ctx.meta["ddpdoctor.passed_on"]


def test_everything_after_the_script_is_the_scripts():
    script, args, opts = parse("hang", "train.py", "--epochs", "3", "--timeout", "5")
    assert (script, args) == ("train.py", ("--epochs", "3", "--timeout", "5"))
    assert opts["timeout"] == 60.0  # the script's --timeout, not ddpdoctor's


def test_options_before_the_script_are_ddpdoctors():
    script, args, opts = parse("check", "--epochs", "2", "--timeout", "9", "t.py", "--lr", "0.1")
    assert (script, args, opts["epochs"], opts["timeout"]) == ("t.py", ("--lr", "0.1"), 2, 9.0)


@pytest.mark.parametrize("alias", [["--script", "t.py"], ["--script=t.py"]])
def test_the_script_option_is_an_option_like_any_other(alias):
    # issue 49: `check --script t.py --epochs 3` gives check its --epochs; the script's own follow --
    script, args, opts = parse("check", "--steps", "4", *alias, "--epochs", "3", "--", "--lr", "0.1")
    assert (script, args, opts["epochs"], opts["steps"]) == ("t.py", ("--lr", "0.1"), 3, 4)


@pytest.mark.parametrize(
    "argv",
    [
        ["--script", "t.py", "--json", "r.json", "--timeout", "30"],  # the original form of the CI steps
        ["--json", "r.json", "--script", "t.py", "--timeout", "30"],
        ["--json", "r.json", "--timeout", "30", "--script", "t.py"],
        ["--json", "r.json", "--timeout", "30", "t.py"],  # positional
        ["--json", "r.json", "--timeout", "30", "--", "t.py"],  # after --
    ],
)
def test_ddpdoctors_options_in_every_position_of_the_three_forms_are_ddpdoctors(argv):
    script, args, opts, passed_on = parse_noted("hang", *argv)
    assert (script, args, opts["json_path"], opts["timeout"], passed_on) == ("t.py", (), "r.json", 30.0, [])


@pytest.mark.parametrize(
    "argv",
    [
        ["--script", "t.py", "--timeout", "30", "--", "--lr", "1", "--json", "x"],
        ["--timeout", "30", "t.py", "--lr", "1", "--json", "x"],
        ["--timeout", "30", "--", "t.py", "--lr", "1", "--json", "x"],
    ],
)
def test_after_the_script_every_token_is_the_scripts_and_ddpdoctors_names_there_are_said(argv):
    script, args, opts, passed_on = parse_noted("hang", *argv)
    assert (script, args, opts["timeout"], opts["json_path"]) == ("t.py", ("--lr", "1", "--json", "x"), 30.0, None)
    assert passed_on == ["--json"]


def test_the_passed_on_line_is_one_line_naming_each_option_once():
    from ddpdoctor.cli.options import passed_on_line

    assert passed_on_line("t.py", []) is None
    line = passed_on_line("t.py", ["--json", "--timeout"])
    assert line is not None and "\n" not in line and "--json, --timeout after the script t.py are the script's" in line


def test_the_cli_says_the_passed_on_names_once_on_stderr(capsys):
    from ddpdoctor.cli import main

    with pytest.raises(SystemExit) as ex:  # the missing script stops the run after the note
        main(["hang", "--", "missing.py", "--timeout", "5", "--timeout=6"])
    err = capsys.readouterr().err.splitlines()
    assert ex.value.code == ExitCode.USAGE
    assert len([x for x in err if "--timeout after the script missing.py is the script's" in x]) == 1, err


def test_a_module_is_the_first_positional_under_dash_m():
    script, args, opts = parse("hang", "-m", "pkg.train", "--lr", "1")
    assert (script, args, opts["module"]) == ("pkg.train", ("--lr", "1"), True)
    script, args, opts = parse("hang", "--module", "--script", "pkg.train", "--timeout", "9", "--", "-x")
    assert (script, args, opts["module"], opts["timeout"]) == ("pkg.train", ("-x",), True, 9.0)


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


def test_a_value_that_reads_like_the_script_option_is_the_value():
    from ddpdoctor.cli.options import script_form

    cmd = run_command(COMMANDS["hang"])
    # --run-dir takes a value: "--script" there is the folder's name, not the option
    assert script_form(cmd, ["--run-dir", "--script", "t.py"]) == (["--run-dir", "--script", "--", "t.py"], [])
    # after the script, --script is the script's own (and said to be one of ddpdoctor's names)
    assert script_form(cmd, ["t.py", "--script", "u.py"]) == (["--", "t.py", "--script", "u.py"], ["--script"])


def test_an_option_of_the_script_before_dash_dash_is_refused_with_where_it_goes(capsys):
    code, err = _cli(capsys, "hang", "--script", "t.py", "--lr", "0.1")
    assert code == ExitCode.USAGE and err.count("\n") == 1
    assert "No such option '--lr': the script's own options go after the script (after -- where --script" in err


def test_a_probes_arguments_that_are_ddpdoctors_names_are_said_too():
    script, args, _opts, passed_on = parse_noted("hang", "--probe", "healthy", "--", "--json", "x")
    assert script.endswith("healthy.py") and args == ("--json", "x") and passed_on == ["--json"]


def test_a_follower_task_finds_its_own_json_as_the_command_parses_it():
    from ddpdoctor.cli import _json_path

    assert _json_path(["hang", "--json", "a.json", "t.py", "--json", "b"]) == "a.json"  # the script's is not
    assert _json_path(["hang", "--script", "t.py", "--json=c.json", "--", "-x"]) == "c.json"
    assert _json_path(["hang", "t.py"]) is None


@pytest.mark.parametrize(
    "argv, launcher",
    [
        (("hang", "--timeout", "9", "--", "accelerate", "launch", "t.py"), True),
        (("hang", "--", "bash", "run.sh"), True),
        (("hang", "--", "python", "-m", "torch.distributed.run", "t.py"), True),
        (("hang", "--", "t.py", "--lr", "1"), False),  # a .py file after --: the script (torchrun's rule)
        (("hang", "bash", "run.sh"), False),  # no --: the first positional is the script, as torchrun takes it
        (("hang", "-m", "--", "pkg.train"), False),  # -m: a module's name
        (("hang", "--script", "t.py", "--", "bash"), False),  # --script names the script; the rest is its
        (("hang", "--probe", "healthy", "--", "x"), False),  # a probe's arguments
        (("hang", "--no-python", "--", "./rank.sh"), False),  # torchrun's --no-python runs the program per rank
    ],
)
def test_a_launch_command_after_the_dashes_is_the_launcher_form(argv, launcher):
    from ddpdoctor.cli.options import launcher_form

    name, *rest = argv
    cmd = run_command(COMMANDS[name])
    assert launcher_form(cmd, list(rest)) is launcher
    ctx = cmd.make_context(name, list(rest))
    assert ctx.meta["ddpdoctor.launcher"] is launcher


def test_a_script_without_the_py_ending_is_still_the_script(tmp_path, monkeypatch):
    from ddpdoctor.cli.options import launcher_form

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train").write_text("print(1)\n")  # not executable: no program runs it, Python does
    assert launcher_form(run_command(COMMANDS["hang"]), ["--", "train"]) is False
    (tmp_path / "train").chmod(0o755)  # a program of the user's (a shebang): run as it is
    assert launcher_form(run_command(COMMANDS["hang"]), ["--", "./train"]) is True


def test_the_launch_command_is_the_users_whole_with_nothing_noted():
    """``--json`` inside the user's command is the command's (its script's option): passed on unnoted, and
    ddpdoctor's own --json before ``--`` is ddpdoctor's."""
    cmd = run_command(COMMANDS["hang"])
    ctx = cmd.make_context("hang", ["--json", "r.json", "--", "torchrun", "t.py", "--json", "x"])
    assert ctx.params["json_path"] == "r.json"
    assert tuple(ctx.params["script_args"]) == ("torchrun", "t.py", "--json", "x")
    assert ctx.meta["ddpdoctor.passed_on"] == []
