"""``--help`` as a PyTorch user reads it: the command's own options, then torchrun's, then the report's; one
line per option at the CLI's width (100 columns); every command with an example; the command list whole."""

from __future__ import annotations

import re

import pytest

from ddpdoctor.cli import cli, main

RUN = ("hang", "check", "memleak", "profile")


def help_of(capsys, monkeypatch, *argv: str) -> str:
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as ex:
        main([*argv, "--help"])
    assert ex.value.code == 0
    return capsys.readouterr().out


def sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if re.match(r"^[A-Za-z].*:$", line):
            current = line[:-1]
            out[current] = []
        elif current and line.strip():
            out[current].append(line)
    return out


@pytest.mark.parametrize("name", RUN)
def test_run_commands_group_their_options(capsys, monkeypatch, name):
    text = help_of(capsys, monkeypatch, name)
    assert text.startswith(f"Usage: ddpdoctor {name} [OPTIONS] SCRIPT [ARGS]...")
    groups = sections(text)
    assert list(groups)[-3:] == ["Options", "torchrun options", "Output options"]
    own = [l.split()[0] for l in groups["Options"]]
    assert own[-1] == "-h," and "--job-store" not in own and "--script" in own
    if name != "hang":
        assert own[0] == "--steps"  # the command's own options before the ones every run shares
    assert [l.split()[0] for l in groups["torchrun options"]][:2] == ["--nproc-per-node", "--nnodes"]
    assert "--nproc-per-node N|auto|cpu|gpu" in text and "--launch [auto|torchrun|spawn]" in text
    assert {"--json", "--select", "--ignore", "--fail-on"} <= {l.split()[0] for l in groups["Output options"]}
    assert re.search(rf"^  ddpdoctor {name} .*\.py", text, re.M), "an example under the command"


@pytest.mark.parametrize("name", [*RUN, "analyze", "attach", "doctor", "compare", "findings"])
def test_one_line_of_help_per_option(capsys, monkeypatch, name):
    text = help_of(capsys, monkeypatch, name)
    for title, lines in sections(text).items():
        if "ptions" not in title:
            continue
        # a continuation line (help wrapped onto the next line) starts with the help column's indent; an
        # option longer than the column has its one line of help on the next line instead
        wrapped, room = [], False
        for l in lines:
            if re.match(r"^  -", l):
                room = not re.match(r"^  \S.*?\s{2,}\S", l)
            elif room:
                room = False
            else:
                wrapped.append(l)
        assert wrapped == [], f"{name} {title}: {wrapped}"
    assert re.search(rf"^  ddpdoctor {name}\b", text, re.M), "an example under the command"


def test_the_command_list_is_not_cut(capsys, monkeypatch):
    text = help_of(capsys, monkeypatch)
    rows = sections(text)["Commands"]
    assert [r.split()[0] for r in rows] == sorted(cli.commands)
    assert not [r for r in rows if r.rstrip().endswith("...")], rows
