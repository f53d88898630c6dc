"""The live view: on a terminal a table per rank redrawn in place (step, steps/s, collectives, state,
line), the workers' own lines printed above it intact; elsewhere the plain status lines, no escape codes.

Real runs under a pseudo-terminal (Python's ``pty``; a bounded read loop; ddpdoctor's session ended by
pid when it overruns; no process left behind), and the pure row builder on hand-built records, up to
1,024 ranks.
"""

from __future__ import annotations

import io
import os
import pty
import re
from types import SimpleNamespace

from builder import RunBuilder, pending

from ddpdoctor.analysis.config import Config
from ddpdoctor.record.reader import load_run
from ddpdoctor.render.live import terminal as live

ROW = re.compile(r"^rank (\d+)\s+(\d+)\s+([\d.]*)\s+(\d+)\s+(\S.*?)(?:\s{2,}(\S+:\d+))?\s*$")


def rows(lines: list[str]) -> list[tuple[int, int, int, str, str]]:
    out = []
    for x in lines:
        m = ROW.match(x.rstrip())
        if m:
            out.append((int(m.group(1)), int(m.group(2)), int(m.group(4)), m.group(5), m.group(6) or ""))
    return out


def test_wanted_only_on_a_terminal(monkeypatch):
    master, slave = pty.openpty()
    try:
        tty = os.fdopen(slave, "w")
        monkeypatch.delenv(live.ENV, raising=False)
        monkeypatch.setenv("TERM", "xterm")
        assert live.wanted(tty)
        assert not live.wanted(io.StringIO())
        r, w = os.pipe()
        with os.fdopen(w, "w") as pipe:
            assert not live.wanted(pipe)
        os.close(r)
        monkeypatch.setenv(live.ENV, "0")
        assert not live.wanted(tty)
        monkeypatch.setenv(live.ENV, "1")
        monkeypatch.setenv("TERM", "dumb")
        assert not live.wanted(tty)
        tty.close()
    finally:
        os.close(master)


# --- the row builder, pure --------------------------------------------------------------------------


def test_rows_per_rank(tmp_path):
    b = RunBuilder(tmp_path / "run")
    for r in (0, 1, 2):
        b.start(r)
    b.hb(0, 10.0, 16, pending("all_reduce", 16, 29, 6.0), where=29, step=4)
    b.hb(1, 10.0, 16, pending("barrier", 16, 32, 9.6, shapes=()), where=32, step=4)
    b.finish(2, 9.0, code=0, seq=16)
    rec = load_run(str(tmp_path / "run"))
    v = live.build_view(rec, 10.0, Config())
    by = {r.label: r for r in v.rows}
    assert list(by) == ["rank 0", "rank 1", "rank 2"]
    assert (by["rank 0"].state, by["rank 0"].where, by["rank 0"].step, by["rank 0"].ncoll) == (
        "waiting 4 s in all_reduce #16",
        "train.py:29",
        "4",
        "16",
    )
    assert by["rank 1"].state == "in barrier #16" and by["rank 1"].kind == "waiting"
    assert by["rank 2"].state == "exited 0" and by["rank 2"].kind == "ended"
    assert dict(v.counts) == {"waiting": 2, "ended": 1}


def test_steps_per_second_over_the_last_seconds():
    rates = live.Rates(window=5.0)

    def rec(t: float, step: int) -> SimpleNamespace:
        return SimpleNamespace(ranks={0: SimpleNamespace(last_hb={"t": t, "step": step})})

    assert rates.rate(0) is None
    for i in range(40):  # 4 steps/s for 10 s; only the last ~5 s count
        rates.observe(rec(100.0 + 0.25 * i, i))
        rates.observe(rec(100.0 + 0.25 * i, i))  # the same heartbeat seen twice counts once
    assert abs(rates.rate(0) - 4.0) < 1e-6
    for i in range(40, 60):  # then it stops
        rates.observe(rec(100.0 + 0.25 * i, 39))
    assert rates.rate(0) == 0.0


def test_1024_ranks_give_a_bounded_table(tmp_path):
    from rich.console import Console

    b = RunBuilder(tmp_path / "run")
    for r in range(1024):
        b.start(r)
        if r == 77:
            b.hb(r, 10.0, 4, pending("all_reduce", 4, 20, 5.0), where=20, step=9)
        elif r in (500, 501, 900):
            b.hb(r, 10.0, 3, None, where=12, step=6 + r % 2)  # behind the others, still running
        else:
            b.hb(r, 10.0, 4, pending("barrier", 4, 30, 5.0, shapes=()), where=30, step=9)
    rec = load_run(str(tmp_path / "run"))
    v = live.build_view(rec, 10.0, Config(), title="hang 12 s")
    assert v.n_ranks == 1024 and len(v.rows) <= live.MAX_GROUPS + live.N_SLOWEST
    alone = [r for r in v.rows if r.ranks == (77,) and not r.note]
    assert alone and alone[0].state == "waiting 5 s in all_reduce #4" and alone[0].where == "train.py:20"
    big = max(v.rows, key=lambda r: len(r.ranks))
    assert len(big.ranks) == 1020 and big.state == "waiting 5 s in barrier #4" and big.label.startswith("1020 ranks [")
    assert len(big.label) < 60
    slow = [r for r in v.rows if r.note == "slowest"]
    assert [r.ranks for r in slow] == [(500,), (900,), (501,)] and slow[0].step == "6"
    assert dict(v.counts) == {"running": 3, "waiting": 1021}
    # the terminal table drawn from it stays short
    buf = io.StringIO()
    Console(file=buf, width=120, force_terminal=False).print(live.render(v))
    text = buf.getvalue()
    assert len(text.splitlines()) <= len(v.rows) + 3, text
    assert "1024 ranks" in text and "rank 77" in text


# --- the doctor's self-test progress ---------------------------------------------------------------


def test_doctor_progress_plain_lines():
    from ddpdoctor.health.selftest import Progress, probes

    buf = io.StringIO()
    todo = [p for p in probes() if p.name in ("healthy.py", "rank_conditional.py")]
    pr = Progress(buf, len(todo))
    for i, p in enumerate(todo, 1):
        pr.start(i, p)
        pr.done(f"ok   {p.name}")
    assert buf.getvalue().splitlines() == [
        "[1/2] hang healthy.py ...",
        "ok   healthy.py",
        "[2/2] hang rank_conditional.py ...",
        "ok   rank_conditional.py",
    ]
    assert "\x1b" not in buf.getvalue()
