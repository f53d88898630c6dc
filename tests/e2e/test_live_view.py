"""The live view: on a terminal a table per rank redrawn in place (step, steps/s, collectives, state,
line), the workers' own lines printed above it intact; elsewhere the plain status lines, no escape codes.

Real runs under a pseudo-terminal (Python's ``pty``; a bounded read loop; ddpdoctor's session ended by
pid when it overruns; no process left behind), and the pure row builder on hand-built records, up to
1,024 ranks.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
import uuid
from pathlib import Path

from helpers import PROBES, TOKEN_VAR, assert_no_orphans

from ddpdoctor.render.live import terminal as live

ESC = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")

CHATTY = """
import sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(STEPS):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"LINE rank={rank} step={step} " + "abcdefghij" * 6, flush=True)
    if rank == 1:
        print(f"ERR rank={rank} step={step} " + "0123456789" * 6, file=sys.stderr, flush=True)
    time.sleep(0.08)
dist.destroy_process_group()
"""
STEPS = 40


def run_in_pty(args: list[str], tmp: Path, timeout: float = 120.0, env: dict | None = None) -> tuple[int, str]:
    """``python -m ddpdoctor ARGS`` with stdout and stderr on a pseudo-terminal (160x40): the exit code
    and everything the terminal received. Bounded: past ``timeout`` its session is killed."""
    token = uuid.uuid4().hex
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    penv = dict(os.environ)
    penv.pop(live.ENV, None)
    # COLUMNS as the window: rich reads the size from the standard streams and falls back to 80 columns where that
    # fails, and the table's line column was then cut on a loaded run
    penv.update({"TERM": "xterm-256color", "COLUMNS": "160", "LINES": "40", TOKEN_VAR: token, **(env or {})})
    p = subprocess.Popen(
        [sys.executable, "-m", "ddpdoctor", *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        env=penv,
        cwd=tmp,
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if p.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every holder of the terminal has closed it
                break
            if not data:
                break
            chunks.append(data)
    finally:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.wait(timeout=30)
        os.close(master)
        assert_no_orphans(token)
    assert time.monotonic() < deadline, f"ddpdoctor did not finish in {timeout} s"
    return p.returncode, b"".join(chunks).decode("utf-8", errors="replace")


def screen_lines(raw: str) -> list[str]:
    """What the terminal received, cut at every line start: a newline, or a carriage return (the table
    returns to the start of its last row and erases it before each redraw); escape sequences removed."""
    return [ESC.sub("", x) for x in re.split(r"\r\n|\r|\n", raw)]


# the line column as drawn: whole, or cut by the terminal's width ("rank_conditional.py:…") when a longer state
# ("waiting 12 s in ...") widened the column before it
ROW = re.compile(r"^rank (\d+)\s+(\d+)\s+([\d.]*)\s+(\d+)\s+(\S.*?)(?:\s{2,}(\S+:(?:\d+|\S*…)))?\s*$")


def rows(lines: list[str]) -> list[tuple[int, int, int, str, str]]:
    out = []
    for x in lines:
        m = ROW.match(x.rstrip())
        if m:
            out.append((int(m.group(1)), int(m.group(2)), int(m.group(4)), m.group(5), m.group(6) or ""))
    return out


def test_table_on_a_terminal_keeps_the_workers_lines_whole(tmp_path):
    script = tmp_path / "chatty.py"
    script.write_text(CHATTY.replace("STEPS", str(STEPS)))
    code, raw = run_in_pty(["hang", "--run-dir", str(tmp_path / "run"), str(script)], tmp_path)
    lines = screen_lines(raw)
    assert code == 0, raw[-3000:]
    assert "\x1b[" in raw, "no escape codes: the table was not drawn in place"
    # every line a worker printed arrived whole, on a line of its own (the table never cut into it)
    for r in (0, 1):
        for s in range(STEPS):
            want = f"[default{r}]:LINE rank={r} step={s} " + "abcdefghij" * 6
            assert want in lines, (want, [x for x in lines if f"rank={r} step={s} " in x])
    for s in range(STEPS):
        assert f"[default1]:ERR rank=1 step={s} " + "0123456789" * 6 in lines
    # the table: a row per rank, redrawn while the steps go up, the last one saying how each rank ended
    got = rows(lines)
    assert {r for r, *_ in got} == {0, 1}, lines[-40:]
    steps0 = [step for r, step, *_ in got if r == 0]
    assert len(set(steps0)) >= 3 and steps0 == sorted(steps0) and max(steps0) >= STEPS - 5, steps0
    assert any(ncoll > 0 for r, _s, ncoll, *_ in got), got[-4:]
    assert any(state == "running" and where.startswith("chatty.py:") for _r, _s, _n, state, where in got)
    # (exited 0; a rank gloo aborts at interpreter exit, a known torch 2.13 teardown fault, shows crashed)
    last = {r: state for r, _s, _n, state, _w in got[-2:]}
    assert set(last) == {0, 1} and all(x == "exited 0" or x.startswith("crashed") for x in last.values()), got[-4:]
    assert "ddpdoctor hang: OK" in raw


def test_table_shows_the_collective_each_rank_waits_in(tmp_path):
    code, raw = run_in_pty(["hang", "--run-dir", str(tmp_path / "run"), str(PROBES / "rank_conditional.py")], tmp_path)
    lines = screen_lines(raw)
    assert code == 3, raw[-3000:]
    got = rows(lines)
    waits = {(r, re.sub(r"waiting \d+ s ", "", state)) for r, _s, _n, state, _w in got if "#" in state}
    assert (0, "in all_reduce #16") in waits and (1, "in barrier #16") in waits, got[-6:]
    assert any(
        r == 0 and where == "rank_conditional.py:29" and "all_reduce" in state for r, _s, _n, state, where in got
    ), [x for x in lines if x.startswith("rank")][-12:]
    # ddpdoctor's own line about the deadlock is printed whole above the table
    assert any(x.startswith("ddpdoctor: deadlock: rank ") for x in lines), lines[-30:]
    assert "hang.rank-conditional-collective" in raw


def test_no_terminal_no_escape_codes(shared_job):
    r = shared_job.run(["hang", str(PROBES / "rank_conditional.py")])
    assert r.code == 3, r.err[-2000:]
    assert "\x1b" not in r.err and "\x1b" not in r.out
    assert "ddpdoctor: deadlock: rank " in r.err  # the plain lines, as before
    assert not re.search(r"^rank \d+\s+\d+", r.err, re.M)


# --- the row builder, pure --------------------------------------------------------------------------


# --- the doctor's self-test progress ---------------------------------------------------------------


def test_doctor_progress_in_place_on_a_terminal(tmp_path):
    code, raw = run_in_pty(
        ["doctor", "--skip-health", "--only", "healthy.py", "--run-dir", str(tmp_path / "d")], tmp_path
    )
    assert code == 0, raw[-3000:]
    # redrawn in place while it runs ("\r" + erase line), then replaced by the result line
    assert re.search(r"\r\x1b\[K\[1/1\] hang healthy\.py \.\.\. \d+ s", raw), raw[-2000:]
    lines = screen_lines(raw)
    assert any(re.match(r"^ok\s+healthy\.py\s+expected no findings\s+got no findings", x) for x in lines), lines
    assert "1/1 probes" in raw
