"""The collective wrappers in-process: a gloo process group of world size 1 in this test process (a
FileStore in tmp_path), the wrappers installed against a fake rank-0 probe (tests/fakeprobe.py), and the
ledger lines its writer received: op, group, position, shapes, the user's line; the end lines of an
asynchronous call and of an error; the counters; the Works; the running digest."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeprobe
import pytest
import torch
import torch.distributed as dist

from ddpdoctor.rank import active, collectives, sites
from ddpdoctor.record import digest, schema

HERE = __file__

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed with gloo is needed"
)


def here(marker: str) -> int:
    for i, text in enumerate(Path(HERE).read_text().splitlines(), 1):
        if marker in text and "here(" not in text:
            return i
    raise AssertionError(marker)


@pytest.fixture
def rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A world of one gloo rank; the collectives wrapped for the fake probe; all of it undone after."""
    assert not dist.is_initialized()
    for op in collectives.WRAPPED:
        if hasattr(dist, op):
            monkeypatch.setattr(dist, op, getattr(dist, op))
    p = fakeprobe.make_probe(tmp_path)
    monkeypatch.setattr(active, "probe", p)
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=20))
    sites.reset_prefixes()
    collectives.install(dist)
    try:
        yield p
    finally:
        monkeypatch.setattr(active, "probe", None)
        dist.destroy_process_group()
        collectives.forget_groups()
        fakeprobe.close(p)


def ledger(p: Any) -> list[dict]:
    return fakeprobe.records(p, schema.LEDGER)


def default_pg() -> Any:
    return dist.distributed_c10d._get_default_group()


def test_each_collective_is_on_the_ledger_with_op_group_position_and_line(rank: Any) -> None:
    pg = default_pg()
    t = torch.ones(3, 2)
    dist.all_reduce(t)  # ALL-REDUCE
    dist.barrier()  # BARRIER
    dist.all_reduce(t)  # ALL-REDUCE-2
    assert t.tolist() == [[1.0, 1.0]] * 3  # the call still ran (world of one: the sum is itself)
    lines = ledger(rank)
    assert [ln["kind"] for ln in lines] == [schema.K_COLL] * 3  # routine returns: no end lines
    name = pg.group_name
    assert [(ln["op"], ln["group"], ln["seq"], ln["st"]) for ln in lines] == [
        ("all_reduce", name, [1, 1], schema.ST_ISSUED),
        ("barrier", name, [2, 2], schema.ST_ISSUED),
        ("all_reduce", name, [3, 3], schema.ST_ISSUED),
    ]
    func = "test_each_collective_is_on_the_ledger_with_op_group_position_and_line"
    assert [ln["site"] for ln in lines] == [
        [HERE, here("# ALL-REDUCE"), func],
        [HERE, here("# BARRIER"), func],
        [HERE, here("# ALL-REDUCE-2"), func],
    ]
    assert lines[0]["shapes"] == [[3, 2]] and lines[0]["dtypes"] == ["float32"] and lines[1]["shapes"] == []
    assert all(ln["rank"] == 0 for ln in lines)
    # the predicted positions held: the group's counter is where the ledger says
    assert pg._get_sequence_number_for_group() == 3
    assert rank.ncoll == 3 and rank.pending is None
    assert name in rank.groups


def test_counters_name_the_last_collective_that_returned(rank: Any) -> None:
    dist.all_reduce(torch.zeros(2))
    dist.all_reduce(torch.zeros(2))
    c = fakeprobe.records(rank, schema.COUNTERS)
    assert len(c) == 1 and c[0]["kind"] == schema.K_COUNTERS
    assert c[0]["ended"] == [default_pg().group_name, 2]


def test_async_all_reduce_gets_an_async_end_line_and_its_work_is_tracked(rank: Any) -> None:
    t = torch.full((5,), 2.0)
    work = dist.all_reduce(t, async_op=True)  # ASYNC
    assert rank.works.q and rank.works.q[-1][1:4] == ["all_reduce", default_pg().group_name, 1]
    work.wait()
    assert rank.works.poll() is None and rank.works.completed == 1 and not rank.works.q
    issued, end = ledger(rank)
    assert (issued["op"], issued["seq"], issued["site"][1]) == ("all_reduce", [1, 1], here("# ASYNC"))
    assert end["kind"] == schema.K_COLL_END
    assert (end["group"], end["s0"], end["s1"], end["async"]) == (default_pg().group_name, 1, 1, True)
    dist.barrier()
    assert ledger(rank)[-1]["seq"] == [2, 2]


def test_a_collective_that_raises_has_an_error_end_line_and_the_error_reaches_the_script(rank: Any) -> None:
    with pytest.raises(TypeError):
        dist.all_reduce(torch.ones(1), op="not an op")  # BAD
    issued, end = ledger(rank)
    assert (issued["op"], issued["seq"], issued["site"][1]) == ("all_reduce", [1, 1], here("# BAD"))
    assert end["kind"] == schema.K_COLL_END and end["s0"] == 1 and end["s1"] is None
    assert end["err"].startswith("TypeError")
    assert rank.pending is None and rank.depth == 0
    dist.all_reduce(torch.ones(1))  # the counter did not move: the next call is position 1 again
    assert ledger(rank)[-1]["seq"] == [1, 1]


def test_each_process_group_has_its_own_positions(rank: Any) -> None:
    sub = dist.new_group([0])
    s_default = default_pg()._get_sequence_number_for_group()
    t = torch.ones(2)
    dist.all_reduce(t, group=sub)  # SUB
    dist.all_reduce(t, group=sub)
    dist.all_reduce(t)  # DEFAULT
    lines = ledger(rank)
    assert sub.group_name != default_pg().group_name
    assert [(ln["group"], ln["seq"]) for ln in lines] == [
        (sub.group_name, [1, 1]),
        (sub.group_name, [2, 2]),
        (default_pg().group_name, [s_default + 1] * 2),
    ]
    assert (lines[0]["site"][1], lines[2]["site"][1]) == (here("# SUB"), here("# DEFAULT"))
    assert rank.digests[sub.group_name][0] == 2 and rank.digests[default_pg().group_name][0] == 1
    assert set(rank.seqs()) >= {sub.group_name, default_pg().group_name}


def test_collectives_from_other_threads_pass_through_unrecorded(rank: Any) -> None:
    errors: list = []

    def worker() -> None:
        try:
            dist.barrier()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    th = threading.Thread(target=worker)
    th.start()
    th.join(20)
    assert not th.is_alive() and errors == []
    assert ledger(rank) == []
    assert default_pg()._get_sequence_number_for_group() == 1  # it ran
    assert rank.ncoll == 0


def test_running_digest_equals_the_fold_over_the_ledger(rank: Any) -> None:
    t = torch.ones(4)
    for _ in range(3):
        dist.all_reduce(t)
    dist.barrier()
    dist.broadcast(t, src=0)
    lines = fakeprobe.kinds(ledger(rank), schema.K_COLL)
    d = 0
    for ln in lines:
        d = digest.fold(d, digest.op_hash(ln["op"], digest.shapes_text(ln["shapes"]), ln["site"]))
    assert rank.digests[default_pg().group_name] == (5, d)
    assert rank.digest_fields()["digest"] == {default_pg().group_name: [5, d]}
    dist.all_reduce(t)  # one call more: another digest
    assert rank.digests[default_pg().group_name][1] != d


def test_without_a_probe_the_wrapper_is_the_plain_call(rank: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert hasattr(dist.all_reduce, "__ddpdoctor_wrapped__")
    monkeypatch.setattr(active, "probe", None)
    t = torch.ones(2)
    dist.all_reduce(t)
    assert ledger(rank) == [] and t.tolist() == [1.0, 1.0]
