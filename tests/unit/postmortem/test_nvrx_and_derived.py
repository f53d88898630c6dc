"""The post-mortem on NVIDIA nvidia-resiliency-ext's real 16-rank NCCL dumps (tests/data/fr/nvrx, with
their fault-injection logs as the ground truth; Apache-2.0, see NOTICE there), and on dumps derived from
real ones: NCCL-style coalesced groups, two jobs' dumps mixed."""

from __future__ import annotations

import pickle
import re
import shutil
from pathlib import Path

import pytest

from ddpdoctor.analysis.config import Config
from ddpdoctor.postmortem import inputs, report, safepickle

DATA = Path(__file__).resolve().parents[2] / "data" / "fr"
NVRX = DATA / "nvrx"


def _report(*paths: Path):
    return report.build(inputs.load([str(p) for p in paths]), Config())


def _faulty(case: str) -> tuple[int, ...]:
    m = re.search(r"Fault ranks: \[([\d, ]+)\]", (NVRX / case / "fault_injection.log").read_text())
    assert m
    return tuple(sorted(int(x) for x in m.group(1).split(",")))


@pytest.mark.parametrize("case", ["gpu_error_1st", "gpu_error_2nd", "lock_gil_1st", "lock_gil_2nd"])
def test_nvrx_faulty_ranks_are_the_culprits(case):
    rep = _report(NVRX / case)
    f = rep.findings[0]
    assert rep.exit_code == 3 and rep.verdict == "hang"
    assert f.culprits == _faulty(case), f.message
    # ranks 0-7 only wait (other pipeline stages); they are never blamed
    assert not set(f.culprits) & set(range(8))
    if case.startswith("lock_gil"):  # the GIL held: their watchdog dumped an empty ring
        assert f.id == "hang.timeout" and "left an empty dump (0 entries)" in f.message
    else:  # a GPU error: inside an op every peer issued, it does not complete
        assert f.id == "hang.transport-stall" and "GPU, NCCL or network fault" in f.message


def test_nvrx_notes_claim_no_buffer_size_and_say_the_cut_once():
    rep = _report(NVRX / "lock_gil_1st")
    cut = [n for n in rep.notes if "older entries" in n]
    assert len(cut) == 1 and "TORCH_FR_BUFFER_SIZE" not in cut[0]


def _nccl_entry(rid: int, seq: int, op: str, sizes: list[list[int]], op_id: int) -> dict:
    return {
        "record_id": rid,
        "pg_id": 0,
        "process_group": ("0", "default_pg"),
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": op_id,
        "profiling_name": f"nccl:{op}",
        "is_p2p": False,
        "input_sizes": sizes,
        "output_sizes": sizes,
        "input_dtypes": ["Float"] * len(sizes),
        "output_dtypes": ["Float"] * len(sizes),
        "state": "scheduled",
        "retired": False,
        "time_created_ns": 10**9 * (rid + 1),
        "timeout_ms": 600000,
        "frames": [],
    }


def test_a_mismatch_in_the_second_op_of_a_coalesced_group_is_named(tmp_path):
    # NCCL records a coalesced group as one entry per op sharing the sequence id, closed by "coalesced"
    for r in (0, 1, 2):
        second = [[5]] if r == 2 else [[4]]
        ents = [
            _nccl_entry(0, 1, "all_reduce", [[8]], 1),
            _nccl_entry(1, 2, "all_reduce", [[8]], 2),
            _nccl_entry(2, 2, "all_reduce", second, 3),
            _nccl_entry(3, 2, "coalesced", [], 4),
        ]
        dump = {
            "version": "2.10",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}},
            "pg_status": {
                "0": {"last_enqueued_collective": 2, "last_started_collective": 2, "last_completed_collective": 1}
            },
            "entries": ents,
        }
        (tmp_path / f"rank_{r}").write_bytes(pickle.dumps(dump))
    rep = _report(tmp_path)
    f = rep.findings[0]
    assert (f.id, f.culprits, rep.exit_code) == ("hang.shape-mismatch", (2,), 3)
    assert "all_reduce([8]) + all_reduce([5])" in f.message


def test_dumps_of_two_jobs_further_apart_than_their_timeout_are_mixed(tmp_path):
    # derived from the real busy job (timeout 60 s): rank 1's records moved 93 s later
    src = DATA / "gloo" / "busy"
    (tmp_path / "rank_0").write_bytes((src / "rank_0").read_bytes())
    raw = safepickle.loads((src / "rank_1").read_bytes())
    assert {e["timeout_ms"] for e in raw["entries"]} == {60000}
    for e in raw["entries"]:
        e["time_created_ns"] += 93 * 10**9
    (tmp_path / "rank_1").write_bytes(pickle.dumps(raw))
    rep = _report(tmp_path)
    assert "postmortem.mixed-dumps" in [f.id for f in rep.findings]
    assert "postmortem.mixed-dumps" not in [f.id for f in _report(src).findings]


def test_torch_case_a_completed_coalesced_broadcast_with_a_different_second_size(tmp_path):
    # torch's analyzer test, case 4, rebuilt: two _broadcast_oop in one coalesced group, all completed;
    # rank 0's second tensor is 5x5 where rank 1's is 4x4 (fr_trace: the collective fails its check)
    for r in (0, 1):
        ents = [
            dict(_nccl_entry(0, 1, "_broadcast_oop", [[4, 4]], 1), state="completed"),
            dict(_nccl_entry(1, 1, "_broadcast_oop", [[5, 5]] if r == 0 else [[4, 4]], 2), state="completed"),
            dict(_nccl_entry(2, 1, "coalesced", [[]], 3), state="completed"),
        ]
        dump = {
            "version": "2.10",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
            "pg_status": {
                "0": {"last_enqueued_collective": 1, "last_started_collective": 1, "last_completed_collective": 1}
            },
            "entries": ents,
        }
        (tmp_path / f"rank_{r}").write_bytes(pickle.dumps(dump))
    rep = _report(tmp_path)
    f = rep.findings[0]
    assert (f.id, rep.exit_code) == ("collective.shape-mismatch", 1)
    assert "_broadcast_oop([4x4]) + _broadcast_oop([5x5])" in f.message


def test_an_empty_dump_next_to_healthy_ones_is_named_not_silent(tmp_path):
    # derived from the real busy job's rank 1 (three collectives, all completed): rank 0 a copy of it, rank 1
    # the same dump with its ring emptied
    src = DATA / "gloo" / "busy"
    raw0 = safepickle.loads((src / "rank_1").read_bytes())
    (tmp_path / "rank_0").write_bytes(pickle.dumps(raw0))
    raw1 = dict(raw0, entries=[])
    (tmp_path / "rank_1").write_bytes(pickle.dumps(raw1))
    rep = _report(tmp_path)
    f = next(f for f in rep.findings if f.id == "postmortem.no-dump")
    assert f.culprits == (1,) and "left an empty flight-recorder dump" in f.message
    line = next(r for r in rep.ranks if r.rank == 1)
    assert "empty flight-recorder dump" in line.detail


def test_a_rank_whose_dump_is_deleted_is_named_where_the_others_are_judged(tmp_path):
    """NVRx's 16-rank dumps with one waiting rank's dump removed: the faulty ranks stay the culprits, and
    the rank without a dump is named in the finding, never dropped."""
    case = "gpu_error_1st"
    for p in (NVRX / case).iterdir():
        if p.name != "_dump_3":
            shutil.copy(p, tmp_path / p.name)
    rep = _report(tmp_path)
    f = rep.findings[0]
    assert f.culprits == _faulty(case) and 3 not in f.culprits
    assert "rank 3 left no flight-recorder dump" in f.message
