"""rank/onabort.py in real processes: SIGABRT runs the dump first, then faulthandler's stack, and the process still
ends by SIGABRT; a forked child and a process past its uninstall write nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from ddpdoctor.rank import onabort

pytestmark = pytest.mark.skipif(not onabort.supported(), reason="Linux with glibc only")

_PRELUDE = """
import faulthandler, os, sys, threading
from ddpdoctor.rank import onabort
out = sys.argv[1]
faulthandler.enable(file=open(out + ".fatal", "w"), all_threads=True)
def dump():
    with open(out + ".dump", "a") as f:
        f.write(f"{os.getpid()} {threading.current_thread().name}\\n")
assert onabort.install(dump)
"""


def _run(body: str, tmp_path) -> tuple[subprocess.CompletedProcess, str, str]:
    out = str(tmp_path / "o")
    code = textwrap.dedent(_PRELUDE) + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code, out], capture_output=True, text=True, timeout=60)
    dump = open(out + ".dump").read() if os.path.exists(out + ".dump") else ""
    fatal = open(out + ".fatal").read() if os.path.exists(out + ".fatal") else ""
    return proc, dump, fatal


def test_an_abort_on_another_thread_dumps_once_then_faulthandler_writes_and_the_process_ends_by_sigabrt(tmp_path):
    proc, dump, fatal = _run(
        """
        import time
        t = threading.Thread(target=os.abort, name="aborter")
        t.start()
        time.sleep(30)
        """,
        tmp_path,
    )
    assert proc.returncode == -signal.SIGABRT
    lines = dump.splitlines()
    assert len(lines) == 1 and lines[0].endswith("aborter"), dump
    assert "Fatal Python error: Aborted" in fatal


def test_an_abort_in_a_forked_child_writes_no_dump_and_the_parent_keeps_its_handler(tmp_path):
    proc, dump, _ = _run(
        """
        print(os.getpid(), flush=True)
        pid = os.fork()
        if pid == 0:
            os.abort()
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == 6, status
        os.abort()
        """,
        tmp_path,
    )
    assert proc.returncode == -signal.SIGABRT
    # one line, the parent's: the child's abort wrote none
    assert dump.split() == [proc.stdout.strip(), "MainThread"]


def test_after_uninstall_an_abort_writes_no_dump_and_still_ends_by_sigabrt(tmp_path):
    proc, dump, fatal = _run(
        """
        onabort.uninstall()
        os.abort()
        """,
        tmp_path,
    )
    assert proc.returncode == -signal.SIGABRT
    assert dump == ""
    assert "Fatal Python error: Aborted" in fatal
