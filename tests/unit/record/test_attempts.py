"""record/attempts.py and the reader's view of a restarted job: attempt k's folder (0700, a manifest copy with
"attempt", made race-free by several ranks at once), torchrun's --max-restarts read back from its arguments,
and load_run giving the last attempt's ranks with the earlier attempts apart, each ended by its restart."""

from __future__ import annotations

import json
import os
import stat
from concurrent.futures import ThreadPoolExecutor

from builder import RunBuilder

from ddpdoctor.record import attempts, schema
from ddpdoctor.record.mirror import load_runs
from ddpdoctor.record.reader import load_run


def test_max_restarts_and_restart_count_read_torchruns_spellings():
    assert attempts.max_restarts(["--nproc-per-node", "2", "--max-restarts", "3", "--standalone"]) == 3
    assert attempts.max_restarts(["--max_restarts=2"]) == 2
    assert attempts.max_restarts(["--max-restarts", "x"]) == 0
    assert attempts.max_restarts(None) == attempts.max_restarts(["--standalone"]) == 0
    assert attempts.restart_count({"TORCHELASTIC_RESTART_COUNT": "2"}) == 2
    assert attempts.restart_count({}) == attempts.restart_count({"TORCHELASTIC_RESTART_COUNT": "?"}) == 0


def test_an_attempt_folder_is_private_and_made_once_by_many_ranks(tmp_path):
    run = tmp_path / "run"
    RunBuilder(run, torchrun_args=["--max-restarts", "2"])
    manifest = json.loads((run / "manifest.json").read_text())
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _i: attempts.make(str(run), manifest, 2), range(8)))
    d = str(run / "attempts" / "2")
    assert {g[0] for g in got} == {d} and all(g[1]["attempt"] == 2 for g in got)
    assert len({g[1]["attempt_created"] for g in got}) == 1  # the first manifest won; no rank read a partial one
    for path in (run / "attempts", run / "attempts" / "2", run / "attempts" / "2" / "ranks"):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    assert (run / "attempts" / "2" / "control").is_dir()
    assert [p.name for p in (run / "attempts" / "2").iterdir() if ".tmp" in p.name] == []
    assert attempts.indices(str(run)) == [2] and attempts.begun(str(run), 2) and not attempts.begun(str(run), 1)


def _restarted(tmp_path):
    """Attempt 0: rank 1 raised, rank 0 was ended by torchrun; attempt 1: both finished."""
    run = tmp_path / "run"
    b = RunBuilder(run, torchrun_args=["--max-restarts", "1"])
    b.add(None, schema.MONITOR, "spawned", 0.5, pid=1)
    b.start(0, 1.0).start(1, 1.0).finish(1, 3.0, code=1, exception=True)
    (run / "ranks" / "1" / "error.json").write_text(
        json.dumps(
            {"type": "ValueError", "message": "boom", "frames": [], "user_frame": ["/work/train.py", 21, "main"]}
        )
    )
    (run / "ranks" / "0" / "terminated.txt").write_text('File "/work/train.py", line 18 in main\n')
    # what the bootstrap of attempt 1 makes (record/attempts.make), at a time the test chooses
    a1 = RunBuilder(run / "attempts" / "1", torchrun_args=["--max-restarts", "1"], attempt=1, attempt_created=5.0)
    a1.start(0, 6.0).start(1, 6.0).finish(0, 8.0, seq=4).finish(1, 8.0, seq=4)
    b.add(None, schema.MONITOR, "restart", 5.5, attempt=1, max_restarts=1)
    b.add(None, schema.MONITOR, "exit", 9.0, returncode=0)
    return run


def test_load_run_gives_the_last_attempt_with_the_earlier_ones_apart(tmp_path):
    run = _restarted(tmp_path)
    record = load_run(str(run))
    assert record.run_dir == str(run) and record.attempt == 1
    assert record.rank_dir(0) == str(run / "attempts" / "1" / "ranks" / "0")
    assert all(r.event("finish")["code"] == 0 for r in record.ranks.values())
    assert record.monitor_event("exit")["returncode"] == 0  # the job's end is the last attempt's
    (first,) = record.attempts
    assert first.attempt == 0 and first.run_dir == str(run) and first.ranks[1].error["type"] == "ValueError"
    ended = first.monitor_event("exit")
    assert ended["restarted"] == 1 and ended["returncode"] is None and ended["t"] == 5.0
    assert [e["kind"] for e in first.monitor] == ["spawned", "exit"]
    # one attempt's folder given on its own is a run of its own
    alone = load_run(str(run / "attempts" / "1"))
    assert alone.attempts == () and alone.manifest["attempt"] == 1
    assert load_runs([str(run)]).attempts[0].ranks[1].error["type"] == "ValueError"


def test_a_run_without_restarts_reads_as_before(tmp_path):
    b = RunBuilder(tmp_path / "run").start(0).finish(0, 2.0)
    record = load_run(str(b.root))
    assert record.attempts == () and record.attempt == 0 and record.records_dir == ""
    assert record.rank_dir(0) == str(b.root / "ranks" / "0")
