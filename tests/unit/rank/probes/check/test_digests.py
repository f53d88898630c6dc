"""What a DataLoader, its samplers, its data set and the RNGs are, read from attributes only
(rank/probes/check/digests.py): the sampler chain outermost first, a data set's fingerprint that differs
when the data differs (and never calls ``__getitem__``), batch digests by shapes and sums, RNG digests that
follow the seed, and Accelerate's shard layer recognised by name."""

from __future__ import annotations

import random

import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, TensorDataset

from ddpdoctor.rank.probes.check.digests import (
    _batch_digest,
    _data_fingerprint,
    _framework_shard,
    _rng_digests,
    _sampler_chain,
)


def test_the_sampler_chain_is_outermost_first() -> None:
    ds = TensorDataset(torch.arange(10.0))
    loader = DataLoader(ds, sampler=DistributedSampler(ds, num_replicas=2, rank=0), batch_size=2)
    assert [type(s).__name__ for s in _sampler_chain(loader)] == ["BatchSampler", "DistributedSampler"]
    plain = DataLoader(ds, batch_size=None)
    assert [type(s).__name__ for s in _sampler_chain(plain)] == ["SequentialSampler"]


class NoIndexing:
    """A data set whose items must never be read by the probe."""

    def __init__(self, files: list[str], scale: float) -> None:
        self.files, self.scale = files, scale

    def __getitem__(self, i: int) -> None:
        raise AssertionError("the probe read an item")


def test_a_data_sets_fingerprint_follows_its_data_and_never_reads_items() -> None:
    a = _data_fingerprint(NoIndexing(["shard-0.bin", "shard-1.bin"], 1.0))
    assert a == _data_fingerprint(NoIndexing(["shard-0.bin", "shard-1.bin"], 1.0))
    assert a != _data_fingerprint(NoIndexing(["shard-2.bin", "shard-3.bin"], 1.0))
    t1 = _data_fingerprint(TensorDataset(torch.arange(1000.0)))
    assert t1 == _data_fingerprint(TensorDataset(torch.arange(1000.0)))
    assert t1 != _data_fingerprint(TensorDataset(torch.arange(1000.0) + 1))
    assert _data_fingerprint(object()) is None  # nothing readable


def test_batch_digests_follow_shapes_and_values() -> None:
    x = {"input": torch.ones(4, 3), "label": torch.tensor([0, 1, 0, 1])}
    assert _batch_digest(x) == _batch_digest({"input": torch.ones(4, 3), "label": torch.tensor([0, 1, 0, 1])})
    assert _batch_digest(x) != _batch_digest({"input": torch.ones(4, 3) * 2, "label": torch.tensor([0, 1, 0, 1])})
    assert _batch_digest([torch.ones(2)]) != _batch_digest([torch.ones(3)])


def test_rng_digests_follow_the_seed() -> None:
    state = torch.get_rng_state(), random.getstate()
    try:
        torch.manual_seed(1)
        random.seed(1)
        a = _rng_digests(torch)
        torch.manual_seed(1)
        random.seed(1)
        assert _rng_digests(torch) == a and a["torch_initial_seed"] == 1
        torch.manual_seed(2)
        b = _rng_digests(torch)
        assert b["torch"] != a["torch"] and b["random"] == a["random"]
    finally:
        torch.set_rng_state(state[0])
        random.setstate(state[1])


def test_accelerates_shard_layer_is_recognised_by_name() -> None:
    BatchSamplerShard = type("BatchSamplerShard", (), {"__module__": "accelerate.data_loader"})
    shard = BatchSamplerShard()
    shard.num_processes, shard.process_index, shard.even_batches, shard.split_batches = 2, 1, True, False
    loader = DataLoader(list(range(4)))
    got = _framework_shard(loader, [shard, BatchSampler(range(4), 2, False)])
    assert got == {"by": "accelerate", "layer": "BatchSamplerShard", "num_processes": 2, "process_index": 1,
                   "even_batches": True, "split_batches": False}  # fmt: skip
    assert _framework_shard(loader, _sampler_chain(loader)) is None
