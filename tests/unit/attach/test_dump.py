"""Stack dumps with py-spy (attach/dump.py), py-spy itself stood in for (no process is started): its JSON
turned outermost-first with the main thread flagged and native waits kept; a refused ptrace, a process
that is gone, a timeout and non-JSON output each a Dump with its error; a missing py-spy refused."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from ddpdoctor.attach import dump
from ddpdoctor.attach.dump import Dump, _threads, dump_all, dump_one, refused
from ddpdoctor.errors import DdpdoctorError, ExitCode

RAW = [
    {"thread_id": 1, "os_thread_id": 11, "thread_name": "Thread-1", "active": False,
     "frames": [{"filename": "/usr/lib/python3.11/threading.py", "line": 320, "name": "wait"}]},
    {"thread_id": 2, "os_thread_id": 12, "thread_name": "MainThread", "active": True,
     "frames": [{"filename": "/venv/torch/distributed/distributed_c10d.py", "line": 2500, "name": "all_reduce"},
                {"filename": "/w/train.py", "line": 42, "name": "main"},
                {"filename": "/w/train.py", "line": 80, "name": "<module>"}]},
]  # fmt: skip


def test_py_spys_threads_become_outermost_first_with_the_main_thread_flagged() -> None:
    t1, main = _threads(RAW, native=False)
    assert main["main"] and not t1["main"] and main["os_tid"] == 12 and main["active"]
    assert main["stack"] == [["/w/train.py", 80, "<module>"], ["/w/train.py", 42, "main"],
                             ["/venv/torch/distributed/distributed_c10d.py", 2500, "all_reduce"]]  # fmt: skip
    (only,) = _threads([dict(RAW[0], thread_name="worker")], native=False)
    assert only["main"]  # no MainThread: the first thread stands for it
    assert _threads({"not": "a list"}, native=False) == []


def test_native_dumps_keep_the_communication_waits() -> None:
    raw = [{"thread_name": "MainThread", "frames": [
        {"name": "pthread_cond_wait", "module": "libc.so"},
        {"name": "c10d::ProcessGroupGloo::AsyncWork::wait", "module": "libtorch.so"},
        {"filename": "/w/train.py", "line": 42, "name": "main", "module": None},
    ]}]  # fmt: skip
    (t,) = _threads(raw, native=True)
    assert t["native"] == ["c10d::ProcessGroupGloo::AsyncWork::wait"] and t["stack"] == [["/w/train.py", 42, "main"]]


def _fake_run(monkeypatch: pytest.MonkeyPatch, **result: Any) -> list[list[str]]:
    calls: list[list[str]] = []

    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess:
        calls.append(argv)
        if result.get("timeout"):
            raise subprocess.TimeoutExpired(argv, kw["timeout"])
        return subprocess.CompletedProcess(argv, result.get("rc", 0), result.get("out", ""), result.get("err", ""))

    monkeypatch.setattr(dump.subprocess, "run", run)
    return calls


def test_a_good_dump_is_nonblocking_unless_native(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_run(monkeypatch, out=json.dumps(RAW))
    d = dump_one("/bin/py-spy", 123, 5.0)
    assert d.error == "" and len(d.threads) == 2
    dump_one("/bin/py-spy", 123, 5.0, native=True)
    assert calls == [["/bin/py-spy", "dump", "--pid", "123", "--json", "--nonblocking"],
                     ["/bin/py-spy", "dump", "--pid", "123", "--json", "--native"]]  # fmt: skip


def test_each_failure_is_a_dump_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_run(monkeypatch, rc=1, err="\nError: Operation not permitted (os error 1)\n")
    d = dump_one("py-spy", 5, 5.0)
    assert d.threads is None and d.error == "ptrace refused: Error: Operation not permitted (os error 1)"
    assert refused({5: d}) and not refused({5: Dump(5, [])})
    _fake_run(monkeypatch, rc=1, err="Error: No such process")
    assert dump_one("py-spy", 5, 5.0).gone
    _fake_run(monkeypatch, timeout=True)
    assert dump_one("py-spy", 5, 2.0).error == "py-spy took over 2 s"
    _fake_run(monkeypatch, out="not json")
    assert dump_one("py-spy", 5, 2.0).error == "py-spy gave output that is not JSON"
    _fake_run(monkeypatch, out=json.dumps(RAW))
    assert sorted(dump_all("py-spy", [7, 8], 1.0)) == [7, 8] and dump_all("py-spy", [], 1.0) == {}


def test_a_missing_py_spy_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dump.sys, "executable", "/nonexistent/bin/python")
    monkeypatch.setattr(dump.shutil, "which", lambda name: None)
    with pytest.raises(DdpdoctorError, match="py-spy not found") as exc:
        dump.py_spy()
    assert exc.value.exit_code == ExitCode.NOT_RUN
