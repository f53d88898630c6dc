"""The profile probe's DDP bucket hook in-process (a one-rank gloo DDP model on a fake rank-0 probe; all
of it undone after): each bucket's all-reduce is a comm range with its size, the gradients are what DDP's
own all-reduce gives, and a script's own comm hook is left alone."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeprobe
import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import dataloader as dl_mod

from ddpdoctor.rank import active
from ddpdoctor.rank.probes.profile import timeline
from ddpdoctor.rank.probes.profile.buckets import ensure_bucket_hook
from ddpdoctor.record import schema

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed with gloo is needed"
)


@pytest.fixture
def tl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    assert not dist.is_initialized()
    monkeypatch.delenv("NVTX_INJECTION64_PATH", raising=False)
    monkeypatch.setattr(torch.autograd, "backward", torch.autograd.backward)
    monkeypatch.setattr(dl_mod._BaseDataLoaderIter, "__next__", dl_mod._BaseDataLoaderIter.__next__)
    monkeypatch.setattr(DDP, "register_comm_hook", DDP.register_comm_hook)
    p = fakeprobe.make_probe(tmp_path)
    monkeypatch.setattr(active, "probe", p)
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=20))
    try:
        yield timeline.install(p, {"sample_ms": 0, "bucket_ranges": True})
    finally:
        dist.destroy_process_group()
        fakeprobe.close(p)


def _grads(model: Any) -> list[list[float]]:
    model(torch.arange(8.0).view(2, 4)).pow(2).sum().backward()
    return [w.grad.flatten().tolist() for w in model.parameters()]


def test_each_bucket_all_reduce_is_a_comm_range_and_the_gradients_are_unchanged(tl: Any) -> None:
    plain = torch.nn.Linear(4, 3)
    model = DDP(torch.nn.Linear(4, 3))
    model.module.load_state_dict(plain.state_dict())
    ensure_bucket_hook(model, tl)
    got = _grads(model)
    plain(torch.arange(8.0).view(2, 4)).pow(2).sum().backward()
    assert got == [w.grad.flatten().tolist() for w in plain.parameters()]  # world of one: the mean is itself
    tl.drain()
    ranges = [r for r in fakeprobe.kinds(fakeprobe.records(tl.p, schema.TIMELINE), schema.K_RANGE)]
    comm = [r for r in ranges if r["cat"] == "comm"]
    assert [(r["name"], r["payload"]) for r in comm] == [("all_reduce bucket 0", 0)]
    assert tl.buckets == [(12 + 3) * 4]  # one bucket: 15 float32 gradients
    assert tl.bucket_cap_mb == pytest.approx(25.0)
    ensure_bucket_hook(model, tl)  # once per model: a second call installs nothing more
    _grads(model)
    tl.drain()
    comm = [r for r in fakeprobe.kinds(fakeprobe.records(tl.p, schema.TIMELINE), schema.K_RANGE) if r["cat"] == "comm"]
    assert len(comm) == 2


def test_a_scripts_own_comm_hook_wins_and_no_bucket_range_is_made(tl: Any) -> None:
    model = DDP(torch.nn.Linear(4, 3))
    seen = []

    def mine(state, bucket):  # type: ignore[no-untyped-def]  # DDP rejects other annotations
        seen.append(bucket.index())
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut

    model.register_comm_hook(None, mine)
    assert model._ddpdoctor_user_hook is True
    ensure_bucket_hook(model, tl)
    _grads(model)
    tl.drain()
    assert seen == [0]
    assert not [
        r for r in fakeprobe.kinds(fakeprobe.records(tl.p, schema.TIMELINE), schema.K_RANGE) if r["cat"] == "comm"
    ]
