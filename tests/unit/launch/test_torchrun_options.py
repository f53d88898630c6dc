"""launch/torchrun_options.py against the installed torch's own parser, and what the tool does with each
option (launch.command.launch_line): every spelling accepted, every PET_* variable read, nothing dropped."""

from __future__ import annotations

import pytest

from ddpdoctor.errors import DdpdoctorError
from ddpdoctor.launch.command import launch_line
from ddpdoctor.launch.torchrun_options import BY_KEY, OWN_PET, TORCHRUN_OPTIONS, std_map


def _torchrun_actions() -> dict[str, tuple[tuple[str, ...], bool, bool]]:
    """dest -> (option strings, takes no value, read from PET_*) of ``torch.distributed.run``'s parser, less
    --help and the positionals."""
    from torch.distributed.argparse_util import check_env, env
    from torch.distributed.run import get_args_parser

    out = {}
    for a in get_args_parser()._actions:
        if not a.option_strings or a.dest == "help":
            continue
        out[a.dest] = (tuple(a.option_strings), a.nargs == 0, isinstance(a, (env, check_env)))
    return out


def test_the_table_is_torchruns_whole_surface_with_both_spellings():
    theirs = _torchrun_actions()
    ours = {o.key: (tuple(sorted(o.names)), o.flag, o.pet is not None) for o in TORCHRUN_OPTIONS}
    assert sorted(ours) == sorted(theirs), "an option torchrun has and the table lacks, or the other way round"
    for key, (names, flag, reads_env) in theirs.items():
        assert ours[key] == (tuple(sorted(names)), flag, reads_env), key


def test_each_pet_variable_is_the_one_torchrun_reads(monkeypatch):
    # torchrun's `env` action reads PET_<DEST>: set each one and see torchrun's own parser take it
    from torch.distributed.run import get_args_parser

    read = [o for o in TORCHRUN_OPTIONS if o.pet]
    for o in read:
        monkeypatch.setenv(str(o.pet), "1" if o.flag else "7")
    args = get_args_parser().parse_args(["t.py"])
    for o in read:
        if o.flag:
            assert getattr(args, o.key) is True, o.pet
        else:
            assert str(getattr(args, o.key)) in ("7", "7.0", "['7']"), o.pet


def test_the_help_imports_no_torch_so_the_table_is_static():
    import subprocess
    import sys

    code = "import sys, ddpdoctor.launch.torchrun_options, ddpdoctor.cli.options; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def _line(opts, env=None):
    return launch_line({"nproc_per_node": "2", **opts}, spawn=False, env=env or {})


def test_options_passed_as_they_are_reach_torchrun_in_its_spelling():
    line = _line({"max_restarts": 2, "monitor_interval": 0.5, "role": "trainer", "standalone": True})
    a = line.torchrun_args
    assert a[a.index("--max-restarts") + 1] == "2" and a[a.index("--monitor-interval") + 1] == "0.5"
    assert a[a.index("--role") + 1] == "trainer" and a.count("--standalone") == 1


def test_options_the_tool_takes_over_do_not_reach_torchrun():
    line = _line({"module": True, "log_dir": "/tmp/x-logs", "redirects": "0:1,1:3", "tee": "3"})
    assert not {"-m", "--module", "--log-dir", "--redirects", "--tee"} & set(line.torchrun_args)
    assert line.module and line.log_dir == "/tmp/x-logs" and line.console_off == {0: 1, 1: 3}
    assert any(n.startswith("--tee") for n in line.notes)


def test_pet_variables_are_read_as_torchrun_reads_them_and_the_taken_over_ones_are_kept_apart(monkeypatch):
    monkeypatch.delenv("PET_NPROC_PER_NODE", raising=False)
    env = {"PET_MAX_RESTARTS": "3", "PET_MODULE": "1", "PET_REDIRECTS": "2"}
    line = launch_line({}, spawn=False, env=env)
    a = line.torchrun_args
    assert a[a.index("--max-restarts") + 1] == "3" and line.module and line.console_off == 2
    assert line.own_env == {"PET_MODULE": "1", "PET_REDIRECTS": "2"}  # hidden from torchrun, the ranks get them
    assert set(OWN_PET) == {BY_KEY[k].pet for k in ("module", "no_python", "run_path", "log_dir", "redirects", "tee")}


def test_the_command_line_wins_over_a_pet_variable():
    line = _line({"max_restarts": 1}, env={"PET_MAX_RESTARTS": "5"})
    assert line.torchrun_args[line.torchrun_args.index("--max-restarts") + 1] == "1"


@pytest.mark.parametrize(
    "opts, words",
    [
        ({"redirects": "7"}, "--redirects must be 0-3"),
        ({"tee": "x:1"}, "--tee must be 0-3"),
    ],
)
def test_an_option_the_tool_cannot_honour_is_one_line(opts, words):
    with pytest.raises(DdpdoctorError) as e:
        _line(opts)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_no_python_is_the_monitors_to_add_around_the_users_program():
    """--no-python runs the user's program in each rank (the launcher path, rank/enter.py): torchrun gets it
    from the monitor (launch/monitor.py torchrun_cmd), right before the program, never among the options."""
    assert "--no-python" not in _line({"no_python": True}).torchrun_args


def test_run_path_is_honoured_in_effect_with_one_line():
    (note,) = _line({"run_path": True}).notes
    assert note.startswith("--run-path:")


def test_std_map_reads_torchruns_forms():
    assert std_map("3") == 3 and std_map(None) == 0 and std_map("0:1,1:2") == {0: 1, 1: 2}
    for bad in ("4", "a", "0:9"):
        with pytest.raises(ValueError):
            std_map(bad)


def test_restarts_on_the_shared_rendezvous_store_get_one_line_naming_the_variable():
    (note,) = _line({"max_restarts": 1}).notes
    assert note.startswith("--max-restarts:") and "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in note
    assert _line({"max_restarts": 1}, env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}).notes == ()
