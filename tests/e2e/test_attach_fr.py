"""`ddpdoctor attach` and torch's flight recorder (FR) of a running job started without ddpdoctor.

Real gloo ranks under plain torchrun (tests/frjobs/attachjob.py, hung for good: rank 1's extra all_reduce on a
second group). With torch's debug server started in the job, attach takes every rank's FR through it (torch 2.13's
worker server runs on CPU) and the report names the culprit from the dumps too; with the FR off it says in one line
that it rests on stacks only, and which variable turns the FR on. NCCL's dump pipe needs a GPU:
tests/e2e/gpu/test_attach_nccl_fr.py. The tests of ``poke`` below exercise only our FIFO-writing code against a FIFO
this test opens itself; they say nothing about NCCL's heartbeat monitor reading it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from frjobs.jobs import JOB as _FRJOB
from helpers import ddpdoctor, finding, free_port, lines_of, marker_line
from userjobs import Job, attach

from ddpdoctor.attach.flight import poke, ring_size, summary
from ddpdoctor.postmortem import flight as frdump

JOB = _FRJOB.parent / "attachjob.py"
SHAPE_JOB = _FRJOB.parent / "shapejob.py"
SHIFT_JOB = _FRJOB.parent / "shiftjob.py"
pytestmark = pytest.mark.skipif(
    not os.access(os.path.join(os.path.dirname(sys.executable), "py-spy"), os.X_OK),
    reason="py-spy is not installed next to this Python",
)


def _torchrun_job(
    tmp: Path,
    env: dict[str, str],
    socket_dir: Path | None = None,
    script: Path = JOB,
    lines: dict | None = None,
    busy: tuple[int, ...] = (),
    script_args: tuple[str, ...] = (),
) -> Job:
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    if socket_dir is None:
        argv += [str(script), *script_args]
    else:  # one socket per rank, in the rank's own environment from its start (torchrun gives all ranks one)
        run = f'TORCH_WORKER_SERVER_SOCKET={socket_dir}/ws_$LOCAL_RANK.sock exec "{sys.executable}" "{JOB}"'
        argv += ["--no-python", "sh", "-c", run]
    job = Job(argv, tmp, env)
    try:
        job.wait_hung(script, lines or {0: marker_line(JOB, "REGULAR"), 1: marker_line(JOB, "EXTRA")}, busy=busy)
    except BaseException:
        job.end()
        raise
    return job


def _dumps_alone(tmp: Path, run_dir: Path) -> dict:
    """``analyze`` of the dumps attach took, as a job's owner keeps them after the job (no stacks, no torch):
    its JSON report, the run said HANG."""
    dpath = tmp / "dumps.json"
    res = ddpdoctor(["analyze", str(run_dir / "fr"), "--json", str(dpath)], tmp, json_report=False)
    assert res.code == 3, res.err
    return json.loads(dpath.read_text())


def _notes(rep: dict, start: str) -> list[str]:
    return [n for n in rep["notes"] if n.startswith(start)]


@pytest.mark.extended  # one of the README tier's slowest jobs (stop 57: the tier read 554-562 s)
def test_attach_takes_the_flight_recorder_through_torchs_debug_server(tmp_path: Path) -> None:
    """...and the property of issue 34: the ledger, the dumps and the stacks of one fault give one verdict."""
    pytest.importorskip("tabulate", reason="torch's debug server (rank 0's frontend) imports tabulate")
    job = _torchrun_job(tmp_path, {"TORCH_FR_BUFFER_SIZE": "100", "ATTACHJOB_DEBUG_PORT": str(free_port())})
    try:
        run_dir = tmp_path / "attach-run"
        code, rep, err = attach(tmp_path, "--pid", str(job.proc.pid), "--no-native", "--run-dir", str(run_dir))
        assert code == 3, err
        f = finding(rep, "hang.rank-conditional-collective")
        assert f["culprits"] == [1]
        assert "from the flight recorder" in f["message"] and "group 1" in f["message"]
        assert lines_of(f, 1) == {marker_line(JOB, "EXTRA")}  # the dumps hold no lines: the stacks give them
        assert lines_of(f, 0) == {marker_line(JOB, "REGULAR")}
        [note] = _notes(rep, "flight recorder taken from")
        assert "ranks 0, 1 through torch's debug server (JSON" in note
        for r in (0, 1):  # as torch's worker server gave them, read with the post-mortem's reader
            d = frdump.load(str(run_dir / "fr" / f"rank_{r}"))
            assert d.fmt == "json" and any(e.op == "all_reduce" for e in d.entries)
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["attach"]["fr"]["ranks"]["1"]["how"] == "torch's debug server"
        assert job.alive(), "attach must leave the job running"
        # analyze of the run directory reads the same dumps with the same stacks (no torch)
        jpath = tmp_path / "analyze.json"
        res = ddpdoctor(["analyze", str(run_dir), "--json", str(jpath)], tmp_path, json_report=False)
        assert res.code == 3, res.err
        again = json.loads(jpath.read_text())
        g = finding(again, "hang.rank-conditional-collective")
        assert g["culprits"] == [1] and "from the flight recorder" in g["message"]
        assert _notes(again, "flight recorder taken from") == [note]
        # --no-fr: stacks only, nothing asked of the job, no line about it
        quiet = tmp_path / "quiet-run"
        code, stacks, err = attach(
            tmp_path, "--pid", str(job.proc.pid), "--no-native", "--no-fr", "--run-dir", str(quiet)
        )
        assert code == 3, err
        assert not (quiet / "fr").exists() and not [n for n in stacks["notes"] if "flight recorder" in n]
        dumps = _dumps_alone(tmp_path, run_dir)
    finally:
        job.end()
    # issue 34's property: the ledger (the same script under ddpdoctor hang), the dumps and the stacks of this
    # fault give one id and one culprit; where a source has lines (the ledger, the stacks), the same line
    led = ddpdoctor(["hang", "--nproc-per-node", "2", str(JOB)], tmp_path, timeout=120)
    assert led.code == 3 and led.report is not None, led.err[-2000:]
    judged = {"ledger": led.report, "dumps": dumps, "stacks": stacks, "dumps and stacks": rep}
    first = {k: (r["findings"][0]["id"], tuple(r["findings"][0]["culprits"])) for k, r in judged.items()}
    assert set(first.values()) == {("hang.rank-conditional-collective", (1,))}, first
    for k in ("ledger", "stacks", "dumps and stacks"):
        assert lines_of(judged[k]["findings"][0], 1) >= {marker_line(JOB, "EXTRA")}, k


@pytest.mark.extended  # three jobs, each judged three ways: the slowest test of the README's tier (stop 57)
@pytest.mark.parametrize(
    ("fault", "culprit", "marker", "waits", "other_waits"),
    [
        ("busy", 1, "BUSY", "BUSY", "REGULAR"),
        ("uneven", 1, "END", "END", "REGULAR"),
        ("shifted", 0, "EXTRA", "REGULAR", "END"),
    ],
)
def test_one_verdict_from_the_ledger_the_dumps_and_the_stacks(
    tmp_path: Path, fault: str, culprit: int, marker: str, waits: str, other_waits: str
) -> None:
    """Issue 34's property on the common hang shapes: rank 1 busy in its own code with nothing pending, rank 1
    out of batches in the final barrier (tests/frjobs/shapejob.py), rank 0's extra call that shifted every call
    after it, so that rank 1 reaches the barrier first (tests/frjobs/shiftjob.py). The ledger (the script under
    ddpdoctor hang), the stacks alone and the dumps with the stacks give one id and name the culprit at
    ``marker``, the other rank at ``other_waits`` (or where the calls parted); the dumps alone give the same or, where they cannot
    tell the sides apart (``uneven`` and ``shifted`` leave the same dumps, sides swapped), a divergence that
    names nobody."""
    pytest.importorskip("tabulate", reason="torch's debug server (rank 0's frontend) imports tabulate")
    script, args = (SHIFT_JOB, ()) if fault == "shifted" else (SHAPE_JOB, (fault,))
    mine, theirs = marker_line(script, marker), marker_line(script, other_waits)
    other = 1 - culprit
    env = {"TORCH_FR_BUFFER_SIZE": "100", "ATTACHJOB_DEBUG_PORT": str(free_port())}
    job = _torchrun_job(
        tmp_path,
        env,
        script=script,
        script_args=args,
        lines={culprit: marker_line(script, waits), other: theirs},
        busy=(1,) if fault == "busy" else (),
    )
    try:
        run_dir = tmp_path / "attach-run"
        code, both, err = attach(tmp_path, "--pid", str(job.proc.pid), "--no-native", "--run-dir", str(run_dir))
        assert code == 3, err
        assert (run_dir / "fr").is_dir(), err
        code, stacks, err = attach(
            tmp_path, "--pid", str(job.proc.pid), "--no-native", "--no-fr", "--run-dir", str(tmp_path / "quiet")
        )
        assert code == 3, err
        dumps = _dumps_alone(tmp_path, run_dir)
    finally:
        job.end()
    led = ddpdoctor(["hang", "--nproc-per-node", "2", "--timeout", "8", str(script), *args], tmp_path, timeout=120)
    assert led.code == 3 and led.report is not None, led.err[-2000:]
    judged = {"ledger": led.report, "dumps": dumps, "stacks": stacks, "dumps and stacks": both}
    first = {k: (r["findings"][0]["id"], tuple(r["findings"][0]["culprits"])) for k, r in judged.items()}
    lined = {first[k] for k in ("ledger", "stacks", "dumps and stacks")}
    assert len(lined) == 1 and next(iter(lined))[1] == (culprit,), first
    # the dumps alone (torch's JSON) hold no lines: a rank that left the loop early and a peer that made an
    # extra call before leave the same dumps, so they may name the divergence and no side, never another rank
    assert first["dumps"] in lined | {("hang.divergent-collective", ())}, first
    for k in ("ledger", "stacks", "dumps and stacks"):
        f = judged[k]["findings"][0]
        assert lines_of(f, culprit) >= {mine}, (k, f)
        # the other rank where it waits now, or (the ledger's first divergence) where the calls parted
        assert lines_of(f, other) & {theirs, marker_line(script, "REGULAR")}, (k, f)


def test_attach_takes_the_flight_recorder_through_the_worker_socket(tmp_path: Path) -> None:
    job = _torchrun_job(tmp_path, {}, socket_dir=tmp_path)
    try:
        run_dir = tmp_path / "attach-run"
        code, rep, err = attach(tmp_path, "--pid", str(job.proc.pid), "--no-native", "--run-dir", str(run_dir))
        assert code == 3, err
        f = finding(rep, "hang.rank-conditional-collective")
        assert f["culprits"] == [1] and "from the flight recorder" in f["message"]
        assert lines_of(f, 1) == {marker_line(JOB, "EXTRA")}
        [note] = _notes(rep, "flight recorder taken from")
        assert "ranks 0, 1 through torch's worker socket (JSON" in note
        assert job.alive()
    finally:
        job.end()


def test_attach_with_the_flight_recorder_off_says_stacks_only_in_one_line(tmp_path: Path) -> None:
    job = _torchrun_job(tmp_path, {"TORCH_FR_BUFFER_SIZE": "0"})
    try:
        run_dir = tmp_path / "attach-run"
        code, rep, err = attach(tmp_path, "--pid", str(job.proc.pid), "--no-native", "--run-dir", str(run_dir))
        assert code == 3, err
        f = finding(rep, "hang.rank-conditional-collective")
        assert f["culprits"] == [1] and "stacks only" in f["message"]
        [note] = [n for n in rep["notes"] if "flight recorder" in n]
        assert note.startswith("stacks only, no flight recorder: ranks 0, 1: its flight recorder is off")
        assert "TORCH_FR_BUFFER_SIZE=0" in note and "TORCH_FR_BUFFER_SIZE=2000" in note
        assert not (run_dir / "fr").exists()
        assert job.alive()
    finally:
        job.end()


# -- our FIFO writer and the one line, without a job ------------------------------------------------------------


def test_poke_writes_only_our_fifo_writer_code(tmp_path: Path) -> None:
    """Our pipe-writing code only: a FIFO this test opens for reading itself, not NCCL's watchdog."""
    pipe = tmp_path / "fr_pipe_0.pipe"
    os.mkfifo(pipe)
    assert "nothing reads" in poke(str(pipe))  # no reader: ENXIO, never a blocked attach
    fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)  # as torch's DumpPipe opens it
    try:
        assert poke(str(pipe)) == ""
        assert os.read(fd, 128) == b"ddpdoctor attach\n"
    finally:
        os.close(fd)
    plain = tmp_path / "plain.pipe"
    plain.write_text("")
    assert "not a named pipe" in poke(str(plain)) and plain.read_text() == ""
    link = tmp_path / "link.pipe"
    link.symlink_to(pipe)
    assert "not a named pipe" in poke(str(link))
    assert "does not exist" in poke(str(tmp_path / "missing.pipe"))


def test_ring_size_reads_torchs_variables_in_torchs_order() -> None:
    assert ring_size({}) is None
    assert ring_size({"TORCH_NCCL_TRACE_BUFFER_SIZE": "0"}) == 0
    assert ring_size({"TORCH_FR_BUFFER_SIZE": "100", "TORCH_NCCL_TRACE_BUFFER_SIZE": "0"}) == 100
    assert ring_size({"TORCH_FR_BUFFER_SIZE": "x"}) is None


def test_summary_is_one_line_naming_what_would_turn_it_on() -> None:
    from ddpdoctor.attach.flight import Outcome, Taken

    gloo = "gloo has no dump trigger and no debug server runs: start the job's ranks with X"
    line = summary(Outcome([Taken(0, why=gloo), Taken(1, why=gloo)]))
    assert line == f"stacks only, no flight recorder: ranks 0, 1: {gloo}" and "\n" not in line
    line = summary(Outcome([Taken(0, "NCCL's dump pipe", "/x", "pickle", 3), Taken(1, why="nothing reads p")]))
    assert (
        line == "flight recorder taken from rank 0 through NCCL's dump pipe (pickle); not from rank 1: nothing reads p"
    )


def _dump_bytes(n: int) -> bytes:
    import pickle

    entries = [
        {"record_id": i, "collective_seq_id": i + 1, "pg_id": 0, "process_group": ["0", "default_pg"],
         "profiling_name": "nccl:all_reduce", "state": "completed", "input_sizes": [[16]], "frames": []}
        for i in range(n)
    ]  # fmt: skip
    return pickle.dumps({"version": "2.10", "entries": entries, "pg_config": {}, "pg_status": {}}, protocol=2)


def test_pipe_wait_only_our_code_against_a_fake_writer_not_nccls_watchdog(tmp_path: Path) -> None:
    """Our bounded wait for the dump file only: a thread of this test plays the rank (reads the FIFO, then writes
    the dump in place in two halves, as torch's DebugInfoWriter writes without a rename). NCCL's own reader is
    tests/e2e/gpu/test_attach_nccl_fr.py."""
    import threading
    import time

    from ddpdoctor.attach.discover import RankProc
    from ddpdoctor.attach.flight import Outcome, Taken, _pipe

    (tmp_path / "dumps").mkdir()
    target = tmp_path / "dumps" / "rank_3"
    target.write_bytes(b"the job's earlier dump")
    os.mkfifo(tmp_path / "p_3.pipe")
    env = {"TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "p_", "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "dumps" / "rank_")}
    rp = RankProc(os.getpid(), 3, 0, 4, [sys.executable], str(tmp_path), 0.0, env)  # a relative pipe: the rank's cwd
    reader = os.open(tmp_path / "p_3.pipe", os.O_RDONLY | os.O_NONBLOCK)
    data = _dump_bytes(7)

    def rank() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if os.read(reader, 128):
                    break
            except BlockingIOError:
                pass
            time.sleep(0.05)
        with open(target, "wb") as f:  # in place, half now, the rest later: attach must not take the half
            f.write(data[: len(data) // 2])
            f.flush()
            time.sleep(0.8)
            f.write(data[len(data) // 2 :])

    t = threading.Thread(target=rank)
    t.start()
    outcome, taken = Outcome(), {3: Taken(3)}
    (tmp_path / "fr").mkdir()
    try:
        _pipe([rp], str(tmp_path / "fr"), str(tmp_path / "earlier"), time.monotonic() + 10, outcome, taken)
    finally:
        t.join(timeout=15)
        os.close(reader)
    assert taken[3].how == "NCCL's dump pipe" and taken[3].fmt == "pickle" and taken[3].entries == 7, taken[3]
    assert (tmp_path / "fr" / "rank_3").read_bytes() == data
    assert (tmp_path / "earlier" / "rank_3").read_bytes() == b"the job's earlier dump"
    # a rank that never dumps: the wait ends at its deadline and says so
    os.unlink(tmp_path / "p_3.pipe")
    os.mkfifo(tmp_path / "p_3.pipe")
    reader = os.open(tmp_path / "p_3.pipe", os.O_RDONLY | os.O_NONBLOCK)
    try:
        taken = {3: Taken(3)}
        t0 = time.monotonic()
        _pipe([rp], str(tmp_path / "fr"), str(tmp_path / "earlier"), t0 + 1.5, Outcome(), taken)
        assert time.monotonic() - t0 < 3 and not taken[3].how
        assert "no new dump appeared" in taken[3].why
    finally:
        os.close(reader)
