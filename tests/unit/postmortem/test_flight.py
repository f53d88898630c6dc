"""postmortem.flight: torch's flight-recorder dumps (pickle and JSON, version 2.x) read into Dumps, on a
real gloo dump (tests/data/fr/gloo) and on hand-built ones; anything else is one DumpError line. Pure."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from ddpdoctor.postmortem import flight

DATA = Path(__file__).resolve().parents[2] / "data" / "fr" / "gloo"


def _entry(rid: int, seq: int, op_id: int | None = None, op: str = "all_reduce", **kw) -> dict:
    e = {
        "record_id": rid,
        "pg_id": 0,
        "process_group": ["0", "default_pg"],
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq if op_id is None else op_id,
        "profiling_name": f"gloo:{op}",
        "is_p2p": False,
        "input_sizes": [[8, 4]],
        "output_sizes": [[8, 4]],
        "input_dtypes": ["Float"],
        "state": "scheduled",
        "retired": False,
        "time_created_ns": 1000 + rid,
        "timeout_ms": 60000,
        "frames": [{"name": "main", "filename": "/job/train.py", "line": 10 + rid}],
    }
    e.update(kw)
    return e


def _dump(entries, status=None, version="2.10", pg_config=None) -> dict:
    return {
        "version": version,
        "entries": entries,
        "pg_config": pg_config or {},
        "pg_status": {
            pg: {"last_enqueued_collective": q, "last_started_collective": -1, "last_completed_collective": c}
            for pg, (q, c) in (status or {}).items()
        },
    }


def _write(path: Path, raw: dict, fmt: str = "pickle") -> str:
    path.write_bytes(pickle.dumps(raw) if fmt == "pickle" else json.dumps(raw).encode())
    return str(path)


@pytest.mark.parametrize("fmt", ["pickle", "json"])
def test_a_dump_in_either_format_gives_the_same_entries(tmp_path, fmt):
    raw = _dump([_entry(1, 2), _entry(0, 1)], {"0": (2, 1)})
    d = flight.load(_write(tmp_path / f"nccl_trace_rank_{3 if fmt == 'pickle' else 12}", raw, fmt))
    assert (d.rank, d.fmt, d.version) == ((3 if fmt == "pickle" else 12), fmt, "2.10")
    assert [e.record_id for e in d.entries] == [0, 1]  # oldest first whatever the file's order
    e = d.entries[0]
    assert (e.group, e.group_desc, e.op, e.backend, e.seq, e.input_sizes) == (
        "0",
        "default_pg",
        "all_reduce",
        "gloo",
        1,
        ((8, 4),),
    )
    assert e.call() == "all_reduce([8x4])" and e.frames[0] == flight.Frame("/job/train.py", 10, "main")
    assert d.stacks and d.pg_status["0"] == flight.PgStatus(2, -1, 1)
    assert d.completed == (True, False) and d.enqueued("0") == 2


def test_the_real_gloo_dump_reads():
    d = flight.load(str(DATA / "kill" / "rank_0"))
    assert (d.rank, d.fmt, d.version.split(".")[0]) == (0, "pickle", "2")
    assert d.entries and all(e.backend == "gloo" for e in d.entries)
    assert d.op_units  # gloo's pg_status counts op ids


def test_the_rank_is_the_number_the_file_name_ends_with(tmp_path):
    raw = _dump([_entry(0, 1)])
    assert flight.load(_write(tmp_path / "dump7", raw)).rank == 7
    with pytest.raises(flight.DumpError, match="cannot tell its rank") as e:
        flight.load(_write(tmp_path / "rank_7.bak", raw))
    assert "\n" not in str(e.value)
    assert flight.looks_like_dump(str(tmp_path / "dump7"))
    assert not flight.looks_like_dump(str(tmp_path / "rank_7.bak"))  # no rank: not taken for a dump


@pytest.mark.parametrize(
    "data, words",
    [
        (pickle.dumps(_dump([_entry(0, 1)]))[:-20], "truncated or broken pickle"),
        (json.dumps(_dump([_entry(0, 1)])).encode()[:-5], "truncated or broken JSON"),
        (pickle.dumps({"entries": []}), "no 'version' and 'entries'"),
        (pickle.dumps(_dump([], version="3.0")), "version 3.0 is not supported (2.x)"),
        (pickle.dumps(_dump([7])), "entry 0 is not a record"),
        (b"\x00\x01garbage", "neither a pickle nor a JSON object"),
    ],
)
def test_a_file_that_is_no_readable_dump_is_one_line(tmp_path, data, words):
    p = tmp_path / "rank_0"
    p.write_bytes(data)
    with pytest.raises(flight.DumpError) as e:
        flight.load(str(p))
    assert words in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith(str(p))


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(flight.DumpError, match="cannot read it"):
        flight.load(str(tmp_path / "rank_0"))


def test_gloo_counts_op_ids_so_a_send_does_not_complete_a_pending_collective(tmp_path):
    # gloo: seq 1 (op 1), a send (op 2, no entry), seq 2 (op 3) pending; pg_status: enqueued op 3, completed op 2
    raw = _dump([_entry(0, 1, 1), _entry(1, 2, 3)], {"0": (3, 2)})
    d = flight.load(_write(tmp_path / "rank_0", raw))
    assert d.op_units
    assert d.completed == (True, False)  # op 3 > 2: pending, though seq 2 <= 2
    assert d.status_seq("0", 2) == 1 and d.enqueued("0") == 2


def test_nccl_counts_sequence_ids(tmp_path):
    raw = _dump(
        [_entry(0, 1, 5, profiling_name="nccl:all_reduce"), _entry(1, 2, 6, profiling_name="nccl:all_reduce")],
        {"0": (2, 1)},
        pg_config={"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
    )
    d = flight.load(_write(tmp_path / "rank_1", raw, "json"))
    assert not d.op_units and d.completed == (True, False) and d.status_seq("0", 1) == 1
    assert d.pg_ranks == {"0": (0, 1)} and d.named_groups and d.group_of("9") == "pg_id 9"


def test_name_groups_names_a_pg_id_of_an_empty_ring_from_the_other_ranks(tmp_path):
    cfg = {"tp": {"ranks": [0, 1]}, "dp": {"ranks": [0, 2]}}
    a = _dump([_entry(0, 1, process_group=["tp", "tp"], pg_id=5)], {"5": (1, 1)}, pg_config=cfg)
    b = _dump([], {"5": (1, 0)}, pg_config=cfg)  # rank 1's ring kept nothing of its pg 5
    d0, d1 = flight.load(_write(tmp_path / "r0", a)), flight.load(_write(tmp_path / "r1", b))
    assert d1.group_of("5") == "pg_id 5"
    _n0, n1 = flight.name_groups([d0, d1])
    assert n1.pg_names == {"5": "tp"} and n1.group_of("5") == "tp"


def test_foreign_and_broken_dumps_are_one_line(tmp_path):
    cases = {
        "foreign": pickle.dumps({"model": [1, 2]}),
        "badjson": b'{"version": "2.10", "entr',
        "v1": pickle.dumps({"version": "1.5", "entries": []}),
        "text": b"hello",
    }
    for name, data in cases.items():
        p = tmp_path / f"{name}_0"
        p.write_bytes(data)
        if name == "text":
            assert not flight.looks_like_dump(str(p))
            continue
        with pytest.raises(flight.DumpError) as e:
            flight.load(str(p))
        assert "\n" not in str(e.value)
    with pytest.raises(flight.DumpError, match="not a flight-recorder dump"):
        flight.load(str(tmp_path / "foreign_0"))
    with pytest.raises(flight.DumpError, match="not supported"):
        flight.load(str(tmp_path / "v1_0"))
