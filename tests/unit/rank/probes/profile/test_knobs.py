"""A tune arm's knobs in-process, in a one-rank gloo world (everything wrapped is put back after): DDP's
constructor gets the arm's arguments whatever the script passed, the script's own are recorded, the
DataLoader gets its workers except for an IterableDataset that does not split itself, and the fp16 hook is
registered at the first forward."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeprobe
import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset, TensorDataset
from torch.utils.data import dataloader as dl_mod

from ddpdoctor.rank import active
from ddpdoctor.rank.probes.profile import knobs, timeline
from ddpdoctor.record import schema

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed with gloo is needed"
)


def _arm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arm: dict[str, Any]) -> Iterator[Any]:
    assert not dist.is_initialized()
    for owner, name in (
        (torch.autograd, "backward"),
        (dl_mod._BaseDataLoaderIter, "__next__"),
        (DDP, "register_comm_hook"),
        (DDP, "__init__"),
        (DataLoader, "__init__"),
    ):
        monkeypatch.setattr(owner, name, getattr(owner, name))
    p = fakeprobe.make_probe(tmp_path)
    monkeypatch.setattr(active, "probe", p)
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=20))
    try:
        yield timeline.install(p, {"sample_ms": 0, "knobs": arm})
    finally:
        dist.destroy_process_group()
        fakeprobe.close(p)


@pytest.fixture
def ddp_arm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from _arm(
        tmp_path, monkeypatch, {"bucket_cap_mb": 50.0, "gradient_as_bucket_view": True, "comm_hook": "fp16"}
    )


@pytest.fixture
def loader_arm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from _arm(tmp_path, monkeypatch, {"num_workers": 2})


def _events(tl: Any, kind: str) -> list[dict]:
    """The records of ``kind`` the arm wrote (one os.write a line: on disk at once)."""
    return [e for e in map(json.loads, Path(tl.w.path).read_text().splitlines()) if e.get("kind") == kind]


def test_ddp_gets_the_arm_arguments_and_the_script_own_are_recorded(ddp_arm):
    model = DDP(torch.nn.Linear(4, 4), None, None, 0, None, True, None, 1)  # bucket_cap_mb=1, positionally
    assert model.bucket_bytes_cap == 50 * 2**20 and model.gradient_as_bucket_view
    [e] = _events(ddp_arm, schema.K_TUNE_DDP)
    assert e["script"]["bucket_cap_mb"] == 1 and e["script"]["gradient_as_bucket_view"] is False
    assert e["arm"] == {"bucket_cap_mb": 50.0, "gradient_as_bucket_view": True}
    ddp_arm.on_forward(model)  # the first forward: the hook goes in before DDP's forward runs
    model(torch.randn(2, 4)).sum().backward()
    ddp_arm.after_forward(model)
    [h] = _events(ddp_arm, schema.K_TUNE_HOOK)
    assert h["registered"] is True and h["hook"] == "fp16"


def test_workers_for_a_dataset_but_not_for_a_stream_that_does_not_split(loader_arm):
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(4))

    mapped = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2)
    stream = DataLoader(Stream(), batch_size=2, num_workers=0)
    assert mapped.num_workers == 2 and stream.num_workers == 0
    a, b = _events(loader_arm, schema.K_TUNE_LOADER)
    assert (a["num_workers"], a["arm"], a["iterable"]) == (0, 2, False)
    assert (b["num_workers"], b["arm"], b["iterable"], b["splits"]) == (0, None, True, False)


def test_a_stream_that_asks_for_its_worker_splits_itself():
    class Split(IterableDataset):
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            return iter(range(0 if info is None else info.id, 8, 1 if info is None else info.num_workers))

    assert knobs._splits_itself(Split()) is True
