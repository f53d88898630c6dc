"""The post-mortem on the records of real gloo jobs (tests/data/fr/gloo: torch 2.13's own dumps and
torchrun's logs of tests/frjobs/frjob.py, see its README), and on dumps derived from them. Each test names
the culprit rank and the line a user sees; each failed on the code before issue 34."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

from ddpdoctor.analysis.config import Config
from ddpdoctor.postmortem import errorfiles, flight, inputs, report, safepickle

DATA = Path(__file__).resolve().parents[2] / "data" / "fr" / "gloo"
LINES = json.loads((DATA / "lines.json").read_text())


def _report(*paths: Path):
    return report.build(inputs.load([str(p) for p in paths]), Config())


def _lines(f, rank: int) -> set[int]:
    return {loc.line for loc in f.locations if loc.rank == rank}


def test_a_rank_with_nothing_pending_is_the_culprit():
    # rank 1 stalls in its data-reading helper before collective #4; rank 0 waits in #4
    rep = _report(DATA / "busy")
    f = rep.findings[0]
    assert (f.id, f.culprits, rep.exit_code, rep.verdict) == ("hang.timeout", (1,), 3, "hang")
    assert "rank 0 waits for rank 1 (rank 0 in all_reduce([8]) (#4 of group 0)" in f.message
    assert "collectives up to #3" in f.message and "rank 1 is behind" in f.message
    assert _lines(f, 0) == {LINES["REGULAR"]}


def test_a_send_recv_before_the_hang_does_not_make_a_pending_collective_done():
    d = flight.load(str(DATA / "p2p" / "rank_0"))
    last = d.entries[-1]
    # the premise: gloo records no p2p entry, its op id moved past the sequence id, pg_status counts op ids
    assert not any(e.is_p2p for e in d.entries) and last.op_id == last.seq + 1
    assert d.pg_status["0"].last_completed == last.op_id - 1 >= last.seq
    rep = _report(DATA / "p2p")
    f = rep.findings[0]
    assert (f.id, f.culprits, rep.exit_code) == ("hang.timeout", (1,), 3)
    assert "#4 of group 0" in f.message and _lines(f, 0) == {LINES["REGULAR"]}


def _with_world(src: Path, dst: Path, ranks: str) -> None:
    raw = safepickle.loads(src.read_bytes())
    raw["pg_config"] = {"": {"name": "", "desc": "", "ranks": ranks}}  # gloo before any subgroup exists
    dst.write_bytes(pickle.dumps(raw))


def test_gloo_pg_config_names_the_world_and_the_rank_without_a_dump(tmp_path):
    # derived: rank 0's real dump alone, with the pg_config gloo writes while the job has one group
    _with_world(DATA / "busy" / "rank_0", tmp_path / "rank_0", "[0, 1]")
    rep = _report(tmp_path / "rank_0")
    f = rep.findings[0]
    assert (f.id, f.culprits, rep.exit_code) == ("postmortem.no-dump", (1,), 3)
    assert "first suspect is rank 1" in f.message
    assert not any("pg_config" in n for n in rep.notes)
    assert [r.state for r in rep.ranks] == ["waiting", "unresponsive"]


def test_an_extra_collective_through_a_helper_names_the_callers_line():
    # both ranks used the side group through sync() at step 0; rank 1 alone calls sync() again at step 2:
    # the innermost user line (sync's) is both ranks'; the caller's line is rank 1's alone
    rep = _report(DATA / "helper")
    f = rep.findings[0]
    assert (f.id, f.culprits, rep.exit_code) == ("hang.rank-conditional-collective", (1,), 3)
    assert _lines(f, 1) == {LINES["EXTRA_HELPER"]} and _lines(f, 0) == {LINES["REGULAR"]}
    assert f"frjob.py:{LINES['EXTRA_HELPER']}" in f.message


def test_a_dtype_mismatch_that_completed_is_reported():
    rep = _report(DATA / "dtype")
    f = rep.findings[0]
    assert (f.id, rep.exit_code) == ("collective.shape-mismatch", 1)
    assert "Float" in f.message and "Int" in f.message and "#3 of group 0" in f.message
    assert _lines(f, 1) == {LINES["DTYPE"]} and _lines(f, 0) == {LINES["REGULAR"]}
    # rank 0's dump was taken before gloo retired its last barrier, which rank 1's records hold completed:
    # read as completed (not pending), and said (torch's analyzer calls it a state mismatch)
    lag = [n for n in rep.notes if "lagged" in n]
    assert lag and lag[0].startswith("rank 0's records leave barrier (#7 of group 0) not completed"), rep.notes


def test_a_size_mismatch_aborts_the_smaller_rank_named_from_its_worker_log():
    # gloo aborted rank 1 (4 elements against 8): exit -6, no dump, faulthandler's stack in its stderr.log
    for path in (DATA / "size", DATA / "size" / "logs"):
        rep = _report(path)
        f = rep.findings[0]
        assert (f.id, f.culprits, rep.exit_code) == ("crash.abnormal-exit", (1,), 1), path
        assert "SIGABRT" in f.message and "Received data size doesn't match" in f.message
        assert _lines(f, 1) == {LINES["SIZE"]}


def test_a_traceback_in_torchruns_log_folder_or_console_names_the_rank_not_sigterm():
    # no @record, so no error file: the traceback is only in the logs; torchrun's summary lists rank 0's
    # SIGTERM (the agent's own doing) and rank 1's exit 1 without a traceback
    base = DATA / "raise-no-record"
    for path in (base, base / "logs", base / "console.log"):
        rep = _report(path)
        f = rep.findings[0]
        assert (f.id, f.culprits, rep.exit_code) == ("crash.exception", (1,), 1), path
        assert "loss is nan at step 3" in f.message and "SIGTERM" not in f.message
        assert _lines(f, 1) == {LINES["RAISE"]}


def test_worker_log_prefixes_and_faulthandler_frames():
    text = "\n".join(
        [
            "[default1]:[rank1]: Traceback (most recent call last):",
            '[default1]:[rank1]:   File "/job/train.py", line 9, in main',
            "[default1]:[rank1]:     step()",
            "[default1]:[rank1]: ValueError: bad batch",
            "[default0]:[rank0]: ok",
            "I1203 agent line",
        ]
    )
    got = errorfiles.worker_errors(text)
    assert [(e.rank, e.message, e.user_frame()) for e in got] == [
        (1, "ValueError: bad batch", ("/job/train.py", 9, "main"))
    ]


def test_analyze_of_the_log_folder_alone_is_no_internal_error(tmp_path):
    logs = tmp_path / "logs"
    shutil.copytree(DATA / "raise-no-record" / "logs", logs)
    for f in logs.rglob("stderr.log"):
        f.write_text("")  # the log folder of a job whose ranks printed nothing: only its layout is left
    p = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "analyze", str(logs), "--json", "-"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert "Traceback" not in p.stderr and p.returncode in (0, 1), p.stderr
    rep = json.loads(p.stdout)
    f = next(f for f in rep["findings"] if f["id"] == "postmortem.no-dump")
    assert f["culprits"] == [0, 1]


def test_a_survivors_dump_whose_failed_collective_reads_completed_is_not_ok():
    # the real kill job: rank 1 SIGKILLed itself; rank 0's all-reduce #5 failed ("Connection reset by peer")
    # and gloo marked it retired and counted it completed; the side group overwrote pg_config's world
    d = flight.load(str(DATA / "kill-fr-only" / "rank_0"))
    last = d.entries[-1]
    assert last.retired and d.pg_status["0"].last_completed == last.op_id == 5 and not d.pg_ranks.get("")
    rep = _report(DATA / "kill-fr-only")
    f = rep.findings[0]
    assert (f.id, f.severity, rep.exit_code) == ("postmortem.no-dump", "error", 1)
    assert "only rank 0 left a flight-recorder dump" in f.message and _lines(f, 0) == {LINES["REGULAR"]}
    # with torchrun's records the killed rank is named, and #5 is not claimed as one it completed
    rep = _report(DATA / "kill")
    f = rep.findings[0]
    assert (f.id, f.culprits) == ("crash.abnormal-exit", (1,))
    assert "up to #4 at least" in f.message and "SIGKILL" in f.message


def test_a_lone_dump_that_waits_is_a_missing_rank_not_a_transport_stall(tmp_path):
    # rank 0's real dump alone (gloo's pg_config names no ranks): "every rank waits" would be rank 0 alone
    shutil.copy(DATA / "busy" / "rank_0", tmp_path / "rank_0")
    rep = _report(tmp_path / "rank_0")
    f = rep.findings[0]
    assert (f.id, f.severity, rep.exit_code) == ("postmortem.no-dump", "error", 3)
    assert "only rank 0 left a flight-recorder dump" in f.message and "waits in all_reduce([8]) (#4" in f.message
    assert not any(g.id == "hang.transport-stall" for g in rep.findings)
    assert _lines(f, 0) == {LINES["REGULAR"]}


def test_an_empty_file_named_like_the_dumps_is_a_rank_without_a_dump(tmp_path):
    shutil.copy(DATA / "busy" / "rank_0", tmp_path / "rank_0")
    (tmp_path / "rank_1").write_bytes(b"")  # its writer died before it wrote, or it was emptied since
    rep = _report(tmp_path)
    f = rep.findings[0]
    assert (f.id, f.culprits, rep.exit_code) == ("postmortem.no-dump", (1,), 3)
    assert "first suspect is rank 1" in f.message
    assert any(n.startswith("rank 1:") and "is empty (0 bytes)" in n for n in rep.notes), rep.notes


def test_only_empty_files_are_one_line_exit_2(tmp_path):
    (tmp_path / "rank_0").write_bytes(b"")
    (tmp_path / "rank_1").write_bytes(b"")
    try:
        inputs.load([str(tmp_path / "rank_0"), str(tmp_path / "rank_1")])
    except inputs.InputError as e:
        assert "empty" in str(e) and "\n" not in str(e)
    else:
        raise AssertionError("two empty files read as evidence")


def test_from_the_log_folder_alone_the_rank_that_lost_its_peer_is_a_victim_not_a_suspect():
    # the kill job's torchrun log folder, no dump: rank 0's log says 'Connection closed by peer', rank 1's
    # holds no error (it SIGKILLed itself): rank 1 is the first suspect, rank 0 its victim
    rep = _report(DATA / "kill" / "logs")
    f = rep.findings[0]
    assert (f.id, f.culprits, rep.exit_code) == ("postmortem.no-dump", (1,), 1)
    assert "the first suspect is rank 1" in f.message
    assert _lines(f, 0) == {LINES["REGULAR"]}


MOE_LINES = json.loads((DATA / "moe-lines.json").read_text())


def test_mixture_of_experts_routing_with_uneven_splits_is_healthy_and_its_busy_rank_the_culprit():
    """tests/frjobs/moejob.py: every step each rank routes its own number of rows to each rank
    (all_to_all_single with uneven splits: inputs of 6x4 and 8x4 by design), then all-reduces. Run whole, the
    job reads OK with no finding: the split sizes are never compared. When rank 1 stalls in its data reader,
    rank 0 waits in the next all-to-all, and rank 1 is the culprit, not a shape mismatch of the all-to-alls
    that completed with different sizes (an earlier judgement blamed them)."""
    ok = _report(DATA / "moe-healthy")
    assert (ok.verdict, ok.exit_code, ok.findings) == ("ok", 0, ())
    d = flight.load(str(DATA / "moe-healthy" / "rank_0"))
    sizes = {e.input_sizes for e in flight.load(str(DATA / "moe-healthy" / "rank_1")).entries if e.op == "all_to_all"}
    assert sizes and sizes.isdisjoint({e.input_sizes for e in d.entries if e.op == "all_to_all"})  # the premise
    rep = _report(DATA / "moe-busy")
    f = rep.findings[0]
    assert (f.id, f.culprits, rep.exit_code) == ("hang.timeout", (1,), 3), [g.message for g in rep.findings]
    assert [g.id for g in rep.findings] == ["hang.timeout"]
    assert "rank 0 in all_to_all([6x4])" in f.message and "up to #6" in f.message
    assert _lines(f, 0) == {MOE_LINES["ROUTE"]} and _lines(f, 1) == {MOE_LINES["REGULAR"]}


ZOO_LINES = json.loads((DATA / "zoo-lines.json").read_text())
ZOO_JOB = Path(__file__).resolve().parents[2] / "frjobs" / "zoojob.py"


def _here(case: str, tmp_path: Path, script: Path = ZOO_JOB) -> Path:
    """The case's dumps with their stacks' zoojob.py frames pointed at ``script``, by default this checkout's
    copy (the dumps name the path the job ran from): a reading of the source needs the file."""
    out = tmp_path / f"{case}-{script.parent.name}"
    out.mkdir()
    for p in sorted((DATA / case).iterdir()):
        d = pickle.loads(p.read_bytes())
        for e in d["entries"]:
            for f in e.get("frames") or []:
                if f["filename"].endswith("/zoojob.py"):
                    f["filename"] = str(script)
        (out / p.name).write_bytes(pickle.dumps(d))
    return out


def test_every_kind_of_call_a_script_makes_reads_ok(tmp_path):
    """tests/frjobs/zoojob.py: tensor collectives, object collectives, p2p (blocking, asynchronous, batched), a
    subgroup, asynchronous work, the coalescing manager and DDP's bucket all-reduces, all completed: no finding
    at all (a false alarm on a healthy job is a defect too), from the dumps as written and with the source."""
    for top in (DATA / "zoo-healthy", _here("zoo-healthy", tmp_path)):
        rep = _report(top)
        assert (rep.verdict, rep.exit_code, rep.findings) == ("ok", 0, ()), [f.message for f in rep.findings]


def test_a_call_under_a_rank_test_at_the_position_where_the_calls_part_is_the_culprits(tmp_path):
    """The same job, where rank 1 alone broadcasts an object list once more under ``if rank == 1:`` (EXTRA)
    and rank 0 goes on to its last all-reduce (LAST): both wait at #33 in different calls. The dumps alone
    cannot tell which side left the common path (a rank that left a loop early looks the same); the source
    of the frames they name can: rank 1's call is under a rank test that rank 0 does not take."""
    alone = _report(_here("zoo-extra", tmp_path, tmp_path / "gone" / "zoojob.py"))  # no source to read
    assert (alone.findings[0].id, alone.findings[0].culprits) == ("hang.divergent-collective", ())
    rep = _report(_here("zoo-extra", tmp_path))
    f = rep.findings[0]
    assert (f.id, f.culprits, rep.exit_code) == ("hang.rank-conditional-collective", (1,), 3), f.message
    assert _lines(f, 1) == {ZOO_LINES["EXTRA"]} and _lines(f, 0) == {ZOO_LINES["LAST"]}
    assert f"under the rank test at zoojob.py:{ZOO_LINES['EXTRA'] - 1}, which rank 0 does not take" in f.message


def test_an_if_else_on_the_rank_names_no_side(tmp_path):
    """The same dumps, read against a zoojob.py whose LAST all-reduce sits under the ``else:`` of EXTRA's rank
    test: each rank took its own branch of one test, which names neither side (the rank-test rule,
    judge.rank_test, as the ledger and the stacks ask it)."""
    text = ZOO_JOB.read_text().splitlines(keepends=True)
    last = ZOO_LINES["LAST"] - 1
    assert text[last].startswith("    dist.all_reduce(")  # the premise: LAST at the test's level
    text[last] = "    else: " + text[last].lstrip()
    script = tmp_path / "ifelse" / "zoojob.py"
    script.parent.mkdir()
    script.write_text("".join(text))
    rep = _report(_here("zoo-extra", tmp_path, script))
    f = rep.findings[0]
    assert (f.id, f.culprits) == ("hang.divergent-collective", ()), f.message
    assert _lines(f, 1) == {ZOO_LINES["EXTRA"]} and _lines(f, 0) == {ZOO_LINES["LAST"]}


PIPE_LINES = json.loads((DATA / "pipe-lines.json").read_text())


def test_pipeline_stages_read_ok_and_their_busy_rank_is_the_culprit():
    """tests/frjobs/pipejob.py, three ranks: rank 0 sends to rank 1 every step, rank 2 takes no part in the p2p
    (gloo counts the sends and recvs in the op ids of ranks 0 and 1 only), then all three all-reduce and meet
    at a barrier. Whole, no finding (NVRx, given pg_config, reports rank 2 missing from the send/recv). With
    rank 1 stalled in its reader, rank 1 is the culprit and ranks 0 and 2 wait at the step's all-reduce."""
    ok = _report(DATA / "pipe-healthy")
    assert (ok.verdict, ok.exit_code, ok.findings) == ("ok", 0, ()), [f.message for f in ok.findings]
    rep = _report(DATA / "pipe-busy")
    f = rep.findings[0]
    assert (f.id, f.culprits, rep.exit_code) == ("hang.timeout", (1,), 3), [g.message for g in rep.findings]
    assert _lines(f, 0) == _lines(f, 2) == {PIPE_LINES["STEP"]}


def test_an_extra_all_reduce_of_fewer_elements_beside_pipeline_stages_names_its_rank_and_line():
    """The same job, where rank 2 alone all-reduces two elements under a rank test at step 3 (EXTRA): gloo lets
    it finish on rank 2's side against the stages' all-reduce of four, and rank 2 waits in its next one. The
    culprit is rank 2 at its line, and the finding says the byte counts differ (it said "the same number of
    bytes" of every such call); torch's fr_trace, given pg_config, blames ranks 0 and 1 for a size mismatch."""
    rep = _report(DATA / "pipe-extra")
    f = rep.findings[0]
    assert (f.id, f.culprits, rep.exit_code) == ("hang.rank-conditional-collective", (2,), 3), f.message
    assert PIPE_LINES["EXTRA"] in _lines(f, 2)
    assert "(8 bytes against 16: it finished on rank 2's side only)" in f.message
