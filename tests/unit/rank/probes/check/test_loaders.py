"""The sampler and DataLoader wrappers (rank/probes/check/loaders.py) in-process on a fake rank-0 probe:
set_epoch recorded with its line, a sampler pass yields exactly the indices the plain sampler yields and
records them with its epoch, and a DataLoader records whether its sampler is distributed and what each
pass fetched (everything wrapped is put back after)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import fakeprobe
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from torch.utils.data import dataloader as dl_mod

from ddpdoctor.rank import active, sites
from ddpdoctor.rank.probes.check import loaders
from ddpdoctor.rank.probes.check.state import Checks
from ddpdoctor.record import schema

PATCHED = [
    (DistributedSampler, "__init__"),
    (DistributedSampler, "set_epoch"),
    (DistributedSampler, "__iter__"),
    (DataLoader, "__init__"),
    (dl_mod._BaseDataLoaderIter, "__init__"),
    (dl_mod._BaseDataLoaderIter, "_next_index"),
    (dl_mod._BaseDataLoaderIter, "__next__"),
]


@pytest.fixture
def checks(fake_probe: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Checks]:
    for owner, name in PATCHED:
        monkeypatch.setattr(owner, name, getattr(owner, name))
    monkeypatch.setattr(active, "probe", fake_probe)
    sites.reset_prefixes()
    c = Checks(fake_probe, None)
    loaders.install(c, torch)
    yield c
    c.w.close()
    c.fp.close()
    fakeprobe.close(fake_probe)


def _recs(c: Checks, *kind: str) -> list[dict]:
    return fakeprobe.kinds(fakeprobe.records(c.p, schema.CHECKS), *kind)


def test_set_epoch_is_recorded_with_the_passes_before_it_and_the_users_line(checks: Checks) -> None:
    s = DistributedSampler(list(range(8)), num_replicas=2, rank=0, shuffle=True, seed=1)
    list(s)
    s.set_epoch(4)
    line = sys._getframe().f_lineno - 1
    (ev,) = _recs(checks, schema.K_SET_EPOCH)
    assert (ev["epoch"], ev["after"], ev["n"]) == (4, 1, 1)
    assert ev["site"][:2] == [__file__, line]


def test_a_sampler_pass_yields_the_plain_samplers_indices_and_records_them(checks: Checks) -> None:
    s = DistributedSampler(list(range(10)), num_replicas=2, rank=1, shuffle=True, seed=3)
    s.set_epoch(2)
    plain = DistributedSampler(list(range(10)), num_replicas=2, rank=1, shuffle=True, seed=3)
    plain.epoch = 2
    got = list(s)
    assert got == list(DistributedSampler.__iter__.__wrapped__(plain))
    ev = next(e for e in _recs(checks, schema.K_SAMPLER) if e["ordinal"] == 0)
    assert (ev["epoch"], ev["seed"], ev["n"], ev["sampler_rank"], ev["indices"]) == (2, 3, 5, 1, got)


def test_a_loader_over_a_distributed_sampler_records_it_and_what_its_pass_fetched(checks: Checks) -> None:
    ds = TensorDataset(torch.arange(12.0))
    s = DistributedSampler(ds, num_replicas=2, rank=0, shuffle=False)
    dl = DataLoader(ds, batch_size=2, sampler=s)
    line = sys._getframe().f_lineno - 1
    batches = [b[0].tolist() for b in dl]
    assert batches == [[0.0, 2.0], [4.0, 6.0], [8.0, 10.0]]  # the same batches as without the probes
    (ev,) = _recs(checks, schema.K_LOADER)
    assert (ev["distributed"], ev["sampler"], ev["batches"], ev["dataset_len"], ev["shuffle"]) == (
        True,
        "DistributedSampler",
        3,
        12,
        False,
    )
    assert ev["site"][:2] == [__file__, line]
    checks.finish()
    (lp,) = _recs(checks, schema.K_LOADER_PASS)
    assert (lp["n"], lp["batches"], lp["indices"], lp["exhausted"]) == (6, 3, [0, 2, 4, 6, 8, 10], True)


def test_a_loader_without_a_distributed_sampler_says_so(checks: Checks) -> None:
    DataLoader(TensorDataset(torch.arange(4.0)), batch_size=2, shuffle=True)
    (ev,) = _recs(checks, schema.K_LOADER)
    assert (ev["distributed"], ev["sampler"], ev["shuffle"], ev["sampler_sid"]) == (False, "RandomSampler", True, None)
