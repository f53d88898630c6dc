"""The live table's presenter pieces (render/live/terminal.py): shown only on a terminal that wants it, a
worker's progress-bar line kept as its last part, and the table rendered with its title counts, rows and
the hidden groups' line."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from ddpdoctor.render.live.rows import Row, View
from ddpdoctor.render.live.terminal import _one_line, render, wanted


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_table_is_wanted_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DDPDOCTOR_LIVE", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert wanted(Tty()) and not wanted(io.StringIO()) and not wanted(object())
    monkeypatch.setenv("DDPDOCTOR_LIVE", "off")
    assert not wanted(Tty())
    monkeypatch.delenv("DDPDOCTOR_LIVE")
    monkeypatch.setenv("TERM", "dumb")
    assert not wanted(Tty())


def test_a_progress_bar_line_keeps_its_last_part() -> None:
    assert _one_line(b"epoch 1  10%\repoch 1  50%\repoch 1 100%\r\n") == "epoch 1 100%"
    assert _one_line("loss 0.5 \xe2\n".encode()) == "loss 0.5 \xe2"
    assert _one_line(b"\xff\n") == "\ufffd"


def test_the_table_shows_counts_rows_and_hidden_groups() -> None:
    rows = (
        Row("rank 0", (0,), "12", "3.1", "40", "running", "train.py:42", "running"),
        Row("rank 1", (1,), "9", "0.0", "37", "waiting 12 s in barrier #37", "train.py:50", "waiting", note="slowest"),
    )
    view = View("hang", rows, 2, (("running", 1), ("waiting", 1)), hidden=3)
    console = Console(file=io.StringIO(), width=140, color_system=None)
    console.print(render(view))
    out = console.file.getvalue()
    assert "ddpdoctor hang: 1 running, 1 waiting" in out
    assert "rank 1 (slowest)" in out and "waiting 12 s in barrier #37" in out and "train.py:50" in out
    assert "... 3 more groups" in out
