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


def _odd_ring() -> list:
    """Entries that share kinds and entries that do not: repeated call sites, a p2p op, numbers as strings
    (JSON), a missing field, a bool where a number should be, an unhashable scalar, record ids out of order."""
    line = {"name": "step", "filename": "/job/train.py", "line": 7}
    same = {"frames": [line]}
    return [
        _entry(3, 3, **same),
        _entry(1, 1, **same),
        _entry(2, 2, **same),
        _entry(4, 1, 4, op="send", is_p2p=True, p2p_seq_id=9, **same),
        _entry(5, "4", "5", **same),  # JSON-style numbers
        _entry(6, 5, True, **same),  # a bool op id
        {k: v for k, v in _entry(7, 6, **same).items() if k != "op_id"},  # no op id
        {k: v for k, v in _entry(8, 7).items() if k != "state"},  # no state
        _entry(9, 8, pg_id=[0], **same),  # an unhashable pg_id
        _entry(10, 9, time_created_ns=None, **same),
        _entry(0, 0, input_sizes=[[2, 2]], **same),
        _entry(11, 10, **same),
    ]


@pytest.mark.parametrize("fmt", ["pickle", "json"])
def test_the_columns_hold_what_each_entry_reads_as_on_its_own(tmp_path, fmt):
    # the reader converts one entry of each kind and reuses it for the equal ones: the Entries it gives back
    # must be those that converting every entry on its own (flight._entry) gives, oldest first
    ring = _odd_ring()
    raw = _dump(ring, {"0": (11, 8)})
    d = flight.load(_write(tmp_path / "rank_0", raw, fmt))
    back = json.loads(json.dumps(ring)) if fmt == "json" else ring
    want = sorted((flight._entry("x", i, e) for i, e in enumerate(back)), key=lambda e: e.record_id)
    assert d.entries == tuple(want)
    assert [d.entry(i) for i in range(d.n_entries)] == want
    assert len(d.kinds) < len(want)  # the equal ones share a kind
    # the judge's maps agree with the entries they stand for
    ops = d.op_units
    done = tuple(
        (e.state == "completed" or e.retired)
        if e.is_p2p or e.pg_id not in d.pg_status
        else (e.op_id if ops else e.seq) <= d.pg_status[e.pg_id].last_completed
        for e in want
    )
    assert d.completed == done and d.open_index == [i for i, c in enumerate(done) if not c]
    for g, idx in d.group_index.items():
        assert [want[i] for i in idx] == [e for e in want if e.group == g and not e.is_p2p]
        assert list(d.done_index[g]) == [i for i in idx if done[i]]
        for e in d.collectives(g):
            assert d.at(g, e.seq) == tuple(x for x in want if x.group == g and not x.is_p2p and x.seq == e.seq)


def test_a_ring_of_distinct_kinds_reads_as_each_entry_on_its_own(tmp_path):
    # every entry its own shape (dynamic shapes): the reader stops looking for equal kinds, and repeats after
    # that are read in full too
    same = {"frames": [{"name": "step", "filename": "/job/train.py", "line": 7}]}
    ring = [_entry(i, i + 1, input_sizes=[[i + 1]]) for i in range(300)]
    ring += [_entry(300 + i, 301 + i, **same) for i in range(50)]
    d = flight.load(_write(tmp_path / "rank_0", _dump(ring, {"0": (350, 349)})))
    assert d.entries == tuple(flight._entry("x", i, e) for i, e in enumerate(ring))
    assert d.open_index == [349] and d.enqueued("0") == 350 and len(d.kinds) == 350


def test_a_ring_that_cycles_through_many_shapes_shares_them(tmp_path):
    # FSDP: one all_gather a layer, each layer its own shape, from one line; the ring repeats them
    same = {"frames": [{"name": "step", "filename": "/job/train.py", "line": 7}]}
    ring = [_entry(i, i + 1, input_sizes=[[i % 100 + 1]], **same) for i in range(1000)]
    d = flight.load(_write(tmp_path / "rank_0", _dump(ring, {"0": (1000, 999)})))
    assert d.entries == tuple(flight._entry("x", i, e) for i, e in enumerate(ring))
    assert len(d.kinds) == 100
