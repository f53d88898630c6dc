"""The check probes' installer (rank/probes/check/installer.py) in-process on a fake rank-0 probe: the
fingerprint schedule, and torch.save recorded with its absolute path, step and the user's line, which the
checkpoint analysis then reads as the line that writes (everything wrapped is put back after)."""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeprobe
import pytest
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler
from torch.utils.data import dataloader as dl_mod

from ddpdoctor.analysis.check.checkpoint import detect
from ddpdoctor.analysis.config import Config
from ddpdoctor.rank import active, sites
from ddpdoctor.rank.probes.check.installer import fingerprint_due, install
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RankRecord, RunRecord

PATCHED = [
    (DistributedSampler, "__init__"),
    (DistributedSampler, "set_epoch"),
    (DistributedSampler, "__iter__"),
    (DataLoader, "__init__"),
    (dl_mod._BaseDataLoaderIter, "__init__"),
    (dl_mod._BaseDataLoaderIter, "_next_index"),
    (dl_mod._BaseDataLoaderIter, "__next__"),
    (torch, "manual_seed"),
    (torch, "save"),
    (DDP, "__init__"),
    (DDP, "_pre_forward"),
]


@pytest.fixture
def checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for owner, name in PATCHED:
        if hasattr(owner, name):
            monkeypatch.setattr(owner, name, getattr(owner, name))
    rng_torch, rng_py = torch.get_rng_state(), random.getstate()
    p = fakeprobe.make_probe(tmp_path)
    monkeypatch.setattr(active, "probe", p)
    sites.reset_prefixes()
    c = install(p, {"every": None})
    yield c
    fakeprobe.close(p)
    torch.set_rng_state(rng_torch)
    random.setstate(rng_py)


def test_the_default_fingerprint_schedule_and_every_k() -> None:
    assert [n for n in range(1, 301) if fingerprint_due(n, None)] == [1, *range(10, 101, 10), 200, 300]
    assert [n for n in range(1, 13) if fingerprint_due(n, 4)] == [1, 4, 8, 12]


def test_torch_save_is_recorded_and_read_as_the_writing_line(
    checks: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    checks.p.steps.n = 25  # the training steps so far (rank/steps.py)
    torch.save({"w": torch.ones(2)}, "ck.pt")  # the save
    line = sys._getframe().f_lineno - 1
    assert torch.load(tmp_path / "ck.pt")["w"].sum() == 2  # the file is written as usual
    (ev,) = fakeprobe.kinds(fakeprobe.records(checks.p, schema.CHECKS), schema.K_SAVE)
    assert ev["path"] == os.path.join(str(tmp_path), "ck.pt") and ev["step"] == 25
    assert ev["site"] == [__file__, line, "test_torch_save_is_recorded_and_read_as_the_writing_line"]
    rec = RunRecord(str(tmp_path), {}, {0: RankRecord(0, checks=[ev]), 1: RankRecord(1, checks=[dict(ev, rank=1)])}, [])
    (f,) = detect(rec, Config())
    assert f.id == "checkpoint.multiple-writers" and {(l.rank, l.line) for l in f.locations} == {(0, line), (1, line)}
