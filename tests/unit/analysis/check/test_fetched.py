"""Shards judged from what the DataLoader iterators fetched (loader_pass records): disjoint covering
shards give nothing; every rank fetching the same samples or the same stream is data.shard-overlap;
shards that leave half the data set out are data.shard-gaps."""

from __future__ import annotations

from ddpdoctor.analysis.check.fetched import _fetched_shards
from ddpdoctor.analysis.check.records import _rank_data
from ddpdoctor.record.reader import RankRecord, RunRecord

SITE = ["/work/train.py", 50, "main"]


def _loader(**kw) -> dict:
    return {
        "kind": "loader",
        "ordinal": 0,
        "site": SITE,
        "sampler": "SequentialSampler",
        "chain": ["SequentialSampler", "BatchSampler"],
        "dataset_len": 100,
        **kw,
    }


def _lp(indices: list[int] | None, **kw) -> dict:
    return {
        "kind": "loader_pass",
        "ordinal": 0,
        "k": 0,
        "steps": 5,
        "exhausted": True,
        "index_kind": "int",
        "indices": indices,
        "n": len(indices or ()),
        "maxb": 4,
        **kw,
    }


def _run(checks: dict[int, list[dict]], skip_overlap: bool = False) -> list:
    rec = RunRecord("/run", {"command": "check"}, {r: RankRecord(r, checks=c) for r, c in checks.items()}, [])
    return _fetched_shards(rec, {r: _rank_data(c) for r, c in checks.items()}, sorted(checks), skip_overlap)


def test_disjoint_shards_covering_the_data_set_are_fine() -> None:
    checks = {r: [_loader(), _lp(list(range(r, 100, 2)))] for r in (0, 1)}
    assert _run(checks) == []


def test_every_rank_fetching_the_whole_data_set_is_an_overlap_on_all_ranks() -> None:
    (f,) = _run({r: [_loader(), _lp(list(range(100)))] for r in (0, 1)})
    assert f.id == "data.shard-overlap" and f.culprits == (0, 1)
    assert f.message == (
        "DataLoader without DistributedSampler (SequentialSampler): every rank iterated all 100 samples of the "
        "same data set in pass 0, so each sample is seen 2x per epoch"
    )
    assert f.evidence["overlap_samples"] == 100 and f.evidence["fetched"] == {0: 100, 1: 100}


def test_a_partial_overlap_names_the_pair_that_shares_samples() -> None:
    checks = {
        0: [_loader(), _lp(list(range(0, 34)))],
        1: [_loader(), _lp(list(range(34, 67)))],
        2: [_loader(), _lp(list(range(20, 53)))],
    }
    (f,) = _run(checks)
    assert f.id == "data.shard-overlap"
    assert "in pass 0 ranks 1 and 2 fetched 19 of the same samples" in f.message
    assert f.culprits == (0, 1, 2) and f.evidence["pairs"] == 2


def test_shards_that_miss_half_the_data_set_are_gaps() -> None:
    checks = {0: [_loader(), _lp(list(range(0, 25)))], 1: [_loader(), _lp(list(range(50, 75)))]}
    (f,) = _run(checks)
    assert f.id == "data.shard-gaps" and f.culprits == (0, 1)
    assert f.message.startswith("pass 0: the ranks together fetched 50 of the 100 samples; 50 are never trained on")
    assert f.evidence["gaps"] == 50 and f.evidence["fetched"] == {0: 25, 1: 25}


def test_a_pass_cut_short_is_not_called_a_gap() -> None:
    checks = {r: [_loader(), _lp(list(range(r * 50, r * 50 + 25)), exhausted=False)] for r in (0, 1)}
    assert _run(checks) == []


def test_passes_that_did_not_train_are_not_compared() -> None:
    checks = {r: [_loader(), _lp(list(range(100)), steps=0)] for r in (0, 1)}
    assert _run(checks) == []


def test_an_iterable_stream_read_the_same_on_every_rank_is_an_overlap() -> None:
    same = {r: [_loader(), _lp(None, index_kind="none", first_batch="h1")] for r in (0, 1)}
    (f,) = _run(same)
    assert f.id == "data.shard-overlap" and f.evidence["iterable"] is True
    assert "every rank read the same stream from its IterableDataset in pass 0" in f.message
    differ = {r: [_loader(), _lp(None, index_kind="none", first_batch=f"h{r}")] for r in (0, 1)}
    assert _run(differ) == []


def test_an_overlap_already_reported_is_not_reported_again() -> None:
    assert _run({r: [_loader(), _lp(list(range(100)))] for r in (0, 1)}, skip_overlap=True) == []
