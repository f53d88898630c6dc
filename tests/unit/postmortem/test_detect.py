"""The post-mortem's pure side: the safe pickle reader and the detector on hand-built dumps (the dump and
error-file readers: test_flight.py, test_errorfiles.py). Real dumps from real ranks: tests/e2e/test_postmortem_jobs.py."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TESTS

from ddpdoctor.analysis.config import Config
from ddpdoctor.postmortem import flight, inputs, report, safepickle


class Boom:
    """Unpickling this runs a shell command that writes a file, on any reader that resolves globals."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def _crafted(tmp: Path) -> tuple[Path, Path]:
    canary = tmp / "pwned"
    dump = {"version": "2.10", "entries": [Boom(str(canary))], "pg_status": {}, "pg_config": {}}
    path = tmp / "dumps" / "rank_0"
    path.parent.mkdir()
    path.write_bytes(pickle.dumps(dump))
    return path, canary


def test_pickle_with_a_callable_is_refused_and_nothing_runs(tmp_path):
    path, canary = _crafted(tmp_path)
    with pytest.raises(safepickle.UnsafePickle, match="posix.system"):
        safepickle.loads(path.read_bytes())
    with pytest.raises(flight.DumpError, match="refused"):
        flight.load(str(path))
    assert not canary.exists()
    pickle.loads(path.read_bytes())  # the same bytes under plain pickle do run: the test can fail
    assert canary.exists()


def test_analyze_refuses_the_crafted_pickle_with_one_line_exit_2(tmp_path):
    path, canary = _crafted(tmp_path)
    for arg in (path, path.parent):
        p = subprocess.run(
            [sys.executable, "-m", "ddpdoctor", "analyze", str(arg)],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        assert p.returncode == 2, p.stderr
        assert p.stderr.count("\n") == 1 and "refused" in p.stderr and "Traceback" not in p.stderr
        assert not canary.exists()


def test_plain_data_only():
    assert safepickle.loads(pickle.dumps({"a": [1, 2.0, ("x", b"y", None, True)]})) == {
        "a": [1, 2.0, ("x", b"y", None, True)]
    }
    with pytest.raises(safepickle.UnsafePickle):
        safepickle.loads(pickle.dumps({1, 2}, protocol=2))  # a set is a global (builtins.set) in protocol 2
    with pytest.raises(safepickle.UnsafePickle):
        safepickle.loads(pickle.dumps(Path("x")))


def _entry(rid, group, seq, op="all_reduce", line=10, sizes=((8,),), t=0):
    return {
        "record_id": rid,
        "pg_id": int(group),
        "process_group": (group, "default_pg" if group == "0" else "g"),
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": f"gloo:{op}",
        "is_p2p": False,
        "input_sizes": [list(s) for s in sizes],
        "output_sizes": [list(s) for s in sizes],
        "input_dtypes": ["Float"],
        "output_dtypes": ["Float"],
        "state": "scheduled",
        "retired": False,
        "time_created_ns": t or 1_000_000_000 * (rid + 1),
        "timeout_ms": 60000,
        "frames": [
            {"name": "all_reduce", "filename": "/x/site-packages/torch/distributed/distributed_c10d.py", "line": 3245},
            {"name": "main", "filename": "/job/train.py", "line": line},
        ],
    }


def _write(tmp: Path, rank: int, entries, status, fmt="pickle", first_id=0) -> None:
    d = {
        "version": "2.10",
        "entries": entries,
        "pg_config": {"": {"desc": "", "name": "", "ranks": "[]"}},
        "pg_status": {
            g: {"last_enqueued_collective": e, "last_started_collective": -1, "last_completed_collective": c}
            for g, (e, c) in status.items()
        },
    }
    data = pickle.dumps(d) if fmt == "pickle" else json.dumps(d).encode()
    (tmp / f"rank_{rank}").write_bytes(data)


def _report(*paths):
    return report.build(inputs.load([str(p) for p in paths]), Config())


def test_extra_call_without_stacks_by_its_group(tmp_path):
    # JSON-like: no frames; rank 2 went off to group 1 that ranks 0 and 1 never used
    for r in (0, 1, 2):
        ents = [dict(_entry(i, "0", i + 1), frames=[]) for i in range(3)]
        if r == 2:
            ents.append(dict(_entry(3, "1", 1), frames=[]))
            _write(tmp_path, r, ents, {"0": (3, 3), "1": (1, -1)}, fmt="json")
        else:
            ents.append(dict(_entry(3, "0", 4), frames=[]))
            _write(tmp_path, r, ents, {"0": (4, 3)}, fmt="json")
    rep = _report(tmp_path)
    f = rep.findings[0]
    assert (f.id, f.culprits, rep.exit_code) == ("hang.rank-conditional-collective", (2,), 3)


def test_every_rank_in_the_same_collective_is_a_transport_stall_or_a_shape_mismatch(tmp_path):
    for r in (0, 1):
        _write(tmp_path, r, [_entry(0, "0", 1), _entry(1, "0", 2, sizes=((8,),) if r == 0 else ((9,),))], {"0": (2, 1)})
    f = _report(tmp_path).findings[0]
    assert f.id == "hang.shape-mismatch"
    for r in (0, 1):
        _write(tmp_path, r, [_entry(0, "0", 1), _entry(1, "0", 2)], {"0": (2, 1)})
    assert _report(tmp_path).findings[0].id == "hang.transport-stall"


def test_two_ranks_whose_calls_differ_are_two_sides_and_the_dumps_say_why(tmp_path):
    # rank 1 waits in a barrier (#3) while rank 0 waits in its third all_reduce (#3). Rank 1 may have run out of
    # batches (tests/e2e/test_attach_fr.py's uneven shape), or rank 0 may have made an extra all_reduce earlier
    # that met a regular one and shifted the sequence (then rank 1 would wait in its last all_reduce and rank 0
    # in the barrier: the same dumps, the other side). Neither is named; the message says what would tell.
    for r in (0, 1):
        ents = [dict(_entry(i, "0", i + 1), frames=[]) for i in range(2)]
        ents.append(dict(_entry(2, "0", 3, op="barrier" if r == 1 else "all_reduce", sizes=((1,),) if r else ((8,),))))
        ents[-1]["frames"] = []
        _write(tmp_path, r, ents, {"0": (3, 2)}, fmt="json")
    f = _report(tmp_path).findings[0]
    assert (f.id, f.culprits) == ("hang.divergent-collective", ())
    assert "rank 1 went on to a call no rank made before while rank 0 continues the calls all made" in f.message
    assert "either rank 1 left the loop early, or rank 0 made an extra call earlier" in f.message
    assert "(the ranks' stacks or the ledger can)" in f.message
    # both calls new: nothing more to say
    for r in (0, 1):
        ents = [dict(_entry(i, "0", i + 1), frames=[]) for i in range(2)]
        ents.append(dict(_entry(2, "0", 3, op="barrier" if r == 1 else "broadcast", sizes=((2,),)), frames=[]))
        _write(tmp_path, r, ents, {"0": (3, 2)}, fmt="json")
    f = _report(tmp_path).findings[0]
    assert (f.id, f.culprits) == ("hang.divergent-collective", ()) and "either" not in f.message


def test_an_all_to_all_with_sizes_of_each_rank_is_no_mismatch(tmp_path):
    # both ranks wait in the same all_to_all (#3), each with its own split of the tokens: the sizes differ by
    # design (torch's analyzer leaves all_to_all undecided), so the code paths agree and the transport stalls;
    # before, this read as a shape mismatch that named both ranks
    for r in (0, 1):
        ents = [dict(_entry(i, "0", i + 1), frames=[]) for i in range(2)]
        ents.append(dict(_entry(2, "0", 3, op="all_to_all", sizes=((3 + 2 * r, 4),)), frames=[]))
        _write(tmp_path, r, ents, {"0": (3, 2)}, fmt="json")
    f = _report(tmp_path).findings[0]
    assert (f.id, f.culprits) == ("hang.transport-stall", ()), f.message
    # an all_reduce with other sizes on each rank stays a mismatch
    for r in (0, 1):
        ents = [dict(_entry(i, "0", i + 1), frames=[]) for i in range(2)]
        ents.append(dict(_entry(2, "0", 3, op="all_reduce", sizes=((3 + 2 * r, 4),)), frames=[]))
        _write(tmp_path, r, ents, {"0": (3, 2)}, fmt="json")
    assert _report(tmp_path).findings[0].id == "hang.shape-mismatch"


def test_ring_too_small_and_different_jobs_are_said(tmp_path):
    _write(tmp_path, 0, [_entry(500, "0", 501), _entry(501, "0", 502)], {"0": (502, 502)})
    _write(tmp_path, 1, [_entry(500, "0", 501, t=10**15), _entry(501, "0", 502, t=10**15 + 1)], {"0": (502, 502)})
    rep = _report(tmp_path)
    assert any("dropped 500 older entries" in n for n in rep.notes)
    assert [f.id for f in rep.findings] == ["postmortem.mixed-dumps"]


def test_mix_with_a_run_directory_and_junit_html(tmp_path):
    golden = tmp_path / "healthy-run"  # a copy: analyze writes report.html into a run directory
    shutil.copytree(TESTS / "golden" / "healthy", golden)
    (tmp_path / "dumps").mkdir()
    tmp_path = tmp_path / "dumps"
    for r in (0, 1):
        ents = [_entry(0, "0", 1), _entry(1, "1" if r == 1 else "0", 1 if r == 1 else 2, line=20 if r == 1 else 10)]
        _write(tmp_path, r, ents, {"0": (1 if r == 1 else 2, 1)} | ({"1": (1, 0)} if r == 1 else {}))
    junit, html = tmp_path / "r.xml", tmp_path / "r.html"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddpdoctor",
            "analyze",
            str(golden),
            str(tmp_path),
            "--json",
            "-",
            "--junit",
            str(junit),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    rep = json.loads(p.stdout)
    assert p.returncode == 3 and rep["verdict"] == "hang", p.stderr
    f = next(f for f in rep["findings"] if f["id"] == "hang.rank-conditional-collective")
    assert f["culprits"] == [1] and {(loc["rank"], loc["line"]) for loc in f["locations"]} == {(1, 20), (0, 10)}
    assert "hang.rank-conditional-collective" in junit.read_text()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddpdoctor",
            "analyze",
            str(tmp_path / "rank_0"),
            str(tmp_path / "rank_1"),
            "--html",
            str(html),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert p.returncode == 3 and "hang.rank-conditional-collective" in html.read_text(), p.stderr


def test_a_collective_another_rank_completed_is_not_pending(tmp_path):
    # gloo marks the work done after wait() returned: a dump written right then shows it pending on one rank
    _write(tmp_path, 0, [_entry(0, "0", 1), _entry(1, "0", 2, op="barrier")], {"0": (2, 2)})
    _write(tmp_path, 1, [_entry(0, "0", 1), _entry(1, "0", 2, op="barrier")], {"0": (2, 1)})
    rep = _report(tmp_path)
    assert (rep.verdict, rep.findings) == ("ok", ())


def _stages(tmp: Path, fmt: str, skip: bool, extra: bool = False) -> None:
    """Three pipeline stages' dumps on gloo (no p2p entries; op ids count them): each step rank 0 sends, rank 1
    receives and sends on, rank 2 receives, then all three all-reduce (line 38) and meet at a barrier (line 40).
    Steps 0-2 whole; at step 3 rank 1 does not send on (``skip``) or the dumps are cut the same way without it.
    ``extra``: at step 3 rank 1 all-reduces once more first (line 37), which meets the others' step all-reduce;
    its own step all-reduce then waits against their barrier (tests/frjobs/stagejob.py's ``extra``)."""
    per = {0: 1, 1: 2, 2: 1}  # p2p ops of each rank's step
    for r, n_p2p in per.items():
        ents, op, rid, seq = [], 0, 0, 0
        for step in range(4):
            op += n_p2p if not (skip and r == 1 and step == 3) else 1
            if extra and r == 1 and step == 3:
                seq += 1
                ents.append(dict(_entry(rid, "0", seq, line=37), op_id=op + 1))
                op, rid = op + 1, rid + 1
            seq += 1
            ents.append(dict(_entry(rid, "0", seq, line=38), op_id=op + 1))
            op, rid = op + 1, rid + 1
            if step == 3 and (not extra or r == 1):
                break  # extra: rank 1 in its own step all-reduce, the others in their barrier (below)
            seq += 1
            ents.append(dict(_entry(rid, "0", seq, op="barrier", line=40), op_id=op + 1))
            op, rid = op + 1, rid + 1
        if r == 2 and not extra:
            # stranded in its receive: the all-reduce of step 3 never made; gloo's pg_status does not count the
            # receive still pending (a real dump of tests/frjobs/stagejob.py's skip reads so)
            ents.pop()
            last = ents[-1]["op_id"]
            _write(tmp, r, ents if fmt == "pickle" else [dict(e, frames=[]) for e in ents], {"0": (last, last)}, fmt)
        else:
            _write(tmp, r, ents if fmt == "pickle" else [dict(e, frames=[]) for e in ents], {"0": (op, op - 1)}, fmt)


@pytest.mark.parametrize("fmt", ["pickle", "json"])
def test_a_stage_that_skipped_its_send_is_named_from_the_op_ids_not_the_stage_it_starved(tmp_path, fmt):
    """gloo records no send or recv, so rank 2 (in its receive) shows nothing pending and read as the rank
    behind. Rank 1's op ids say its step 3 made one p2p op fewer than each of its earlier steps: it is the
    culprit, named at its next call (the pickle's frames: line 38)."""
    _stages(tmp_path, fmt, skip=True)
    rep = _report(tmp_path)
    f = rep.findings[0]
    assert (f.id, f.culprits, rep.exit_code) == ("hang.rank-conditional-collective", (1,), 3), f.message
    assert "skipped a point-to-point call" in f.message
    if fmt == "pickle":
        assert {(loc.rank, loc.line) for loc in f.locations if loc.role == "after the skipped call"} == {(1, 38)}


@pytest.mark.parametrize("fmt", ["pickle", "json"])
def test_a_stage_that_all_reduced_once_more_is_named_at_its_extra_call(tmp_path, fmt):
    """Rank 1's extra all-reduce (line 37) met the others' step all-reduce (line 38); they wait in their
    barrier, it in its own step all-reduce, at one position. Each stage read against its own earlier steps
    (p2p ops counted by gloo's op ids) names rank 1's extra call, from the pickle at its line and from the JSON
    (no frames) all the same; before, the dumps read a divergent collective at the next call's line."""
    _stages(tmp_path, fmt, skip=False, extra=True)
    rep = _report(tmp_path)
    f = rep.findings[0]
    assert (f.id, f.culprits, rep.exit_code) == ("hang.rank-conditional-collective", (1,), 3), f.message
    assert "#7 of group 0" in f.message, f.message
    if fmt == "pickle":
        assert {(loc.rank, loc.line) for loc in f.locations if loc.role == "extra call"} == {(1, 37)}
        assert {(loc.rank, loc.line) for loc in f.locations if loc.role == "victim"} == {(0, 40), (2, 40)}
    else:
        assert not f.locations


def test_stages_whose_steps_all_agree_with_their_own_earlier_steps_name_no_skipped_call(tmp_path):
    """The same three stages where rank 1 did send on at step 3: every stage is where its own routine has it,
    and rank 2 (behind, nothing pending) stays the rank the others wait for."""
    _stages(tmp_path, "pickle", skip=False)
    rep = _report(tmp_path)
    assert rep.exit_code != 0
    assert not any("skipped a point-to-point call" in f.message for f in rep.findings), [
        f.message for f in rep.findings
    ]
