"""Shard overlap and padding from the loaders and DistributedSampler passes (analysis/check/shards.py):
disjoint shards give nothing, a plain DataLoader on every rank or overlapping Subsets is
data.shard-overlap, samplers with a different seed name the odd rank, padding is a note."""

from __future__ import annotations

from ddpdoctor.analysis.check.records import _rank_data
from ddpdoctor.analysis.check.shards import _shards
from ddpdoctor.record.reader import RankRecord, RunRecord

SITE = ["/work/train.py", 30, "main"]


def _run(checks: dict[int, list[dict]]) -> list:
    rec = RunRecord("/run", {"command": "check"}, {r: RankRecord(r, checks=c) for r, c in checks.items()}, [])
    return _shards(rec, {r: _rank_data(c) for r, c in checks.items()})


def _loader(**kw) -> dict:
    return {"kind": "loader", "ordinal": 0, "site": SITE, "sampler": "RandomSampler", "dataset_len": 100, **kw}


def _pass(rank: int, indices: list[int], n: int = 10, seed: int = 0, world: int = 2, **kw) -> dict:
    return {
        "kind": "sampler",
        "ordinal": 0,
        "k": 0,
        "sid": 1,
        "epoch": 0,
        "seed": seed,
        "shuffle": True,
        "drop_last": False,
        "num_replicas": world,
        "sampler_rank": rank,
        "dataset_len": n,
        "n": len(indices),
        "indices": indices,
        "site": SITE,
        **kw,
    }


def test_a_plain_dataloader_on_every_rank_repeats_the_data_set() -> None:
    (f,) = _run({0: [_loader()], 1: [_loader()]})
    assert f.id == "data.shard-overlap" and f.culprits == (0, 1)
    assert f.message == (
        "DataLoader without DistributedSampler (RandomSampler): every rank iterates the same data set of "
        "100 samples, so each sample is seen 2x per epoch"
    )
    assert [(l.rank, l.line) for l in f.locations] == [(0, 30), (1, 30)]


def test_disjoint_hand_made_subsets_are_fine_overlapping_ones_are_not() -> None:
    ok = {r: [_loader(subset_digest=f"d{r}", subset=list(range(r * 5, r * 5 + 5)))] for r in (0, 1)}
    assert _run(ok) == []
    bad = {0: [_loader(subset_digest="a", subset=[0, 1, 2, 3])], 1: [_loader(subset_digest="b", subset=[2, 3, 4, 5])]}
    (f,) = _run(bad)
    assert f.id == "data.shard-overlap" and f.culprits == (0, 1)
    assert f.message.startswith("hand-made shards overlap: ranks 0 and 1 share 2 samples of their Subsets")
    assert f.evidence == {"overlap_samples": 2, "pairs": 1}


def test_pre_sharded_data_sets_are_not_compared() -> None:
    assert _run({r: [_loader(data_fp=f"fp{r}")] for r in (0, 1)}) == []


def test_distributed_samplers_that_split_the_data_exactly_give_nothing() -> None:
    assert _run({0: [_pass(0, [0, 2, 4, 6, 8])], 1: [_pass(1, [1, 3, 5, 7, 9])]}) == []


def test_padding_to_divide_the_data_set_is_a_note() -> None:
    (f,) = _run({0: [_pass(0, [0, 2, 4, 6, 8], n=9)], 1: [_pass(1, [1, 3, 5, 7, 0], n=9)]})
    assert f.id == "data.padding-duplicates" and f.severity == "note"
    assert f.message.startswith("DistributedSampler pads 1 duplicate sample(s) per epoch so that 9 samples divide")


def test_a_sampler_with_another_seed_is_the_culprit() -> None:
    # three ranks of 9 samples: ranks 0 and 1 split by seed 0, rank 2 drew with seed 7 and repeats theirs
    checks = {
        0: [_pass(0, [0, 3, 6], n=9, world=3)],
        1: [_pass(1, [1, 4, 7], n=9, world=3)],
        2: [_pass(2, [0, 4, 8], n=9, world=3, seed=7)],
    }
    (f,) = _run(checks)
    assert f.id == "data.shard-overlap" and f.culprits == (2,)
    assert "pass 0 of the DistributedSampler: the ranks' shards overlap by 2 samples and miss 2 of 9" in f.message
    assert "the samplers' seeds differ (0 on 2 ranks [0,1], 7 on rank 2)" in f.message
    assert f.evidence["seeds"] == {0: 0, 1: 0, 2: 7}


def test_num_replicas_not_matching_the_world_names_the_wrong_rank() -> None:
    # rank 1 was told num_replicas=3: its third of the data set repeats two of rank 0's half
    checks = {0: [_pass(0, [0, 2, 4, 6, 8])], 1: [_pass(1, [1, 4, 7, 0], world=3)]}
    (f,) = _run(checks)
    assert f.id == "data.shard-overlap" and f.culprits == (1,)
    assert "overlap by 2 samples" in f.message
    assert (
        "num_replicas/rank do not match the process group (world size 2; num_replicas 2 on rank 0, 3 on rank 1"
        in f.message
    )


def test_a_single_rank_has_no_shards_to_compare() -> None:
    assert _run({0: [_loader()]}) == []
