"""postmortem.errorfiles: the error file a ``@record`` rank writes, torchrun's failure summary in a log, and the
ranks' own tracebacks in a worker log or a console log with ``[rank1]:`` lines; on the records of real gloo
jobs (tests/data/fr/gloo) and hand-written ones. Pure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddpdoctor.postmortem import errorfiles

DATA = Path(__file__).resolve().parents[2] / "data" / "fr" / "gloo"
LINES = json.loads((DATA / "lines.json").read_text())


def _attempt(case: str) -> Path:
    (folder,) = (DATA / case / "logs").iterdir()
    return folder / "attempt_0"


def test_a_real_error_file_gives_the_message_frames_and_the_folders_rank():
    path = _attempt("kill") / "0" / "error.json"
    assert errorfiles.is_error_file(str(path))
    e = errorfiles.load(str(path))
    assert (e.rank, e.local_rank, e.attempt) == (0, 0, 0)  # from attempt_0/0/
    assert e.message.startswith("RuntimeError: ") and "Connection reset by peer" in e.message
    assert e.victim  # its peer went away: not this rank's fault
    assert e.timestamp == 1796314767.0 and e.path == str(path)
    assert e.user_frame() is not None and e.user_frame()[1:] == (LINES["REGULAR"], "train")
    assert e.frames[-1][2] == "all_reduce"  # outermost first: torch's own frame last


def test_the_new_message_format_and_an_error_code(tmp_path):
    p = tmp_path / "attempt_2" / "3" / "error.json"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps({"message": "ValueError: bad batch"}))
    e = errorfiles.load(str(p))
    assert (e.rank, e.attempt, e.message, e.frames, e.timestamp) == (3, 2, "ValueError: bad batch", (), None)
    assert not e.victim and e.user_frame() is None
    p.write_text(json.dumps({"message": {"message": "x", "errorCode": 7, "extraInfo": {"timestamp": "soon"}}}))
    e = errorfiles.load(str(p))
    assert (e.exitcode, e.timestamp) == (7, None)


def test_outside_torchruns_log_folder_the_rank_is_unknown(tmp_path):
    p = tmp_path / "error.json"
    p.write_text(json.dumps({"message": "boom"}))
    assert errorfiles.load(str(p)).rank is None


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"message": {"mess', "truncated or broken JSON"),
        ('{"error": "x"}', "not a torchrun error file (no 'message')"),
        ("[1, 2]", "not a torchrun error file (no 'message')"),
    ],
)
def test_a_file_that_is_no_error_file_is_one_line(tmp_path, text, words):
    p = tmp_path / "error.json"
    p.write_text(text)
    with pytest.raises(errorfiles.ErrorFileError) as e:
        errorfiles.load(str(p))
    assert words in str(e.value) and "\n" not in str(e.value)


def test_is_error_file_wants_json_with_a_message(tmp_path):
    (tmp_path / "a.json").write_text('{"message": "x"}')
    (tmp_path / "b.json").write_text('{"version": "2.10", "entries": []}')
    (tmp_path / "c.json").write_text("{")
    (tmp_path / "d.txt").write_text('{"message": "x"}')
    assert [errorfiles.is_error_file(str(tmp_path / n)) for n in ("a.json", "b.json", "c.json", "d.txt")] == [
        True,
        False,
        False,
        False,
    ]
    assert not errorfiles.is_error_file(str(tmp_path / "missing.json"))


def test_the_real_torchrun_summary_blames_the_killed_rank_as_root_cause():
    got = errorfiles.summaries((DATA / "kill" / "torchrun.log").read_text())
    by_rank = {e.rank: e for e in got}
    assert set(by_rank) == {0, 1}
    assert by_rank[1].root_cause and by_rank[1].exitcode == -9 and by_rank[1].path == ""
    assert "SIGKILL" in by_rank[1].message
    assert not by_rank[0].root_cause and by_rank[0].exitcode == 1 and by_rank[0].victim
    assert by_rank[0].path.endswith("attempt_0/0/error.json")
    assert by_rank[0].user_frame()[1] == LINES["REGULAR"]


def test_a_console_log_gives_each_prefixed_ranks_traceback_and_not_the_agents():
    text = (DATA / "raise-no-record" / "console.log").read_text()
    (e,) = errorfiles.worker_errors(text, str(DATA / "raise-no-record" / "console.log"))
    assert (e.rank, e.local_rank, e.message) == (1, None, "RuntimeError: loss is nan at step 3")
    assert e.user_frame()[1:] == (LINES["RAISE"], "train") and not e.victim


def test_a_worker_log_of_the_log_folder_takes_the_folders_local_rank(tmp_path):
    log = tmp_path / "attempt_1" / "2" / "stderr.log"
    log.parent.mkdir(parents=True)
    log.write_text(
        "some output\n"
        "Traceback (most recent call last):\n"
        '  File "/job/train.py", line 12, in <module>\n'
        "    main()\n"
        '  File "/job/train.py", line 9, in main\n'
        "    1 / 0\n"
        "ZeroDivisionError: division by zero\n"
    )
    (e,) = errorfiles.worker_errors(log.read_text(), str(log))
    assert (e.rank, e.local_rank, e.attempt, e.message) == (2, 2, 1, "ZeroDivisionError: division by zero")
    assert e.frames == (("/job/train.py", 12, "<module>"), ("/job/train.py", 9, "main"))


def test_a_native_crash_is_the_fatal_error_with_the_distributed_threads_stack():
    text = "\n".join(
        [
            "[rank0]: terminate called after throwing an instance of 'c10::DistBackendError'",
            "[rank0]:   what():  NCCL watchdog timeout",
            "[rank0]: Fatal Python error: Aborted",
            "[rank0]: Thread 0x1 (most recent call first):",
            '[rank0]:   File "/x/site-packages/torch/distributed/distributed_c10d.py", line 3000 in barrier',
            '[rank0]:   File "/job/train.py", line 40 in main',
            "[rank0]: Thread 0x2 (most recent call first):",
            '[rank0]:   File "/x/threading.py", line 300 in wait',
        ]
    )
    (e,) = errorfiles.worker_errors(text)
    assert e.rank == 0 and e.exitcode == -6
    assert e.message == "Fatal Python error: Aborted: NCCL watchdog timeout"
    assert e.frames == (
        ("/job/train.py", 40, "main"),
        ("/x/site-packages/torch/distributed/distributed_c10d.py", 3000, "barrier"),
    )


def test_torchrun_summary_is_parsed():
    text = """
Failures:
[1]:
  time      : 2026-12-02_07:55:06
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 7002)
  error_file: /l/attempt_0/0/error.json
  traceback : Traceback (most recent call last):
    File "/job/train.py", line 66, in main
      dist.all_reduce(x)
  RuntimeError: Connection closed by peer [127.0.0.1]:45767
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_07:55:06
  host      : localhost
  rank      : 3 (local_rank: 1)
  exitcode  : -9 (pid: 7003)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 7003
============================================================
"""
    got = errorfiles.summaries(text)
    assert [(e.rank, e.local_rank, e.exitcode, e.victim) for e in got] == [(0, 0, 1, True), (3, 1, -9, False)]
    assert got[0].user_frame() == ("/job/train.py", 66, "main") and got[1].root_cause


def _summary(failed: int, root: int) -> str:
    return f"""============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  rank      : {failed} (local_rank: {failed})
  exitcode  : 1 (pid: 7002)
  error_file: <N/A>
  traceback : RuntimeError: Connection closed by peer
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : {root} (local_rank: {root})
  exitcode  : -9 (pid: 7003)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 7003
============================================================
"""


def test_only_the_root_cause_block_of_each_summary_is_the_root_cause():
    # two summaries in one log (a job run twice, its console appended): the second's Failures block is not
    # a root cause because the first summary had one
    text = _summary(0, 1) + "running the job again\n" + _summary(1, 0)
    got = [(e.rank, e.root_cause) for e in errorfiles.summaries(text)]
    assert got == [(0, False), (1, True), (1, False), (0, True)]
