"""The profile probe's Timeline in-process on a fake rank-0 probe in a one-rank gloo world (everything
wrapped is put back after): which steps' ranges are kept, the forward/backward/optimizer/step and
DataLoader-wait ranges it writes, the phase the main thread is in, and the profile facts it writes from
DDP's logger (a model that answers as DDP's does: a real DDP costs a torch._dynamo import, test_buckets)."""

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
from torch.utils.data import DataLoader
from torch.utils.data import dataloader as dl_mod

from ddpdoctor.rank import active
from ddpdoctor.rank.probes.profile import timeline
from ddpdoctor.record import schema

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed with gloo is needed"
)


@pytest.fixture
def tl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    assert not dist.is_initialized()
    monkeypatch.delenv("NVTX_INJECTION64_PATH", raising=False)
    monkeypatch.delenv("NVTX_INJECTION32_PATH", raising=False)
    monkeypatch.setattr(torch.autograd, "backward", torch.autograd.backward)
    monkeypatch.setattr(dl_mod._BaseDataLoaderIter, "__next__", dl_mod._BaseDataLoaderIter.__next__)
    monkeypatch.setattr(DDP, "register_comm_hook", DDP.register_comm_hook)
    p = fakeprobe.make_probe(tmp_path)
    monkeypatch.setattr(active, "probe", p)
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=20))
    try:
        yield timeline.install(p, {"sample_ms": 0})
    finally:
        dist.destroy_process_group()
        fakeprobe.close(p)


class Logged(torch.nn.Linear):
    """A model whose ``_get_ddp_logging_data`` answers as DDP's logger does (sizes as text, times in ns)."""

    def _get_ddp_logging_data(self) -> dict:
        return {
            "has_rebuilt_buckets": 1,
            "rebuilt_bucket_sizes": "40, 8",
            "bucket_sizes": "48",
            "bucket_cap_bytes": 25 * 2**20,
            "avg_backward_compute_time": 2_500_000,
            "avg_backward_comm_time": 1_000_000,
            "avg_backward_compute_comm_overlap_time": 0,
        }


def _records(tl: Any, kind: str) -> list[dict]:
    return fakeprobe.kinds(fakeprobe.records(tl.p, schema.TIMELINE), kind)


def _step(tl: Any, model: Any, opt: Any) -> None:
    tl.on_forward(model)
    loss = model(torch.ones(3, 4)).sum()
    tl.after_forward(model)
    assert tl.phase == "other:forward"
    loss.backward()
    assert tl.phase == "other:backward"
    tl.on_optimizer_step(opt)
    assert tl.phase == "optimizer"
    with torch.no_grad():  # SGD by hand: torch.optim's first step imports torch._dynamo (seconds)
        for w in opt:
            w -= 0.1 * w.grad
            w.grad = None
    tl.after_optimizer_step(opt)
    tl.after_step(tl.step + 1)  # the step ends (rank/steps.py: here at the optimizer step's end)


def test_every_step_is_kept_up_to_1000_then_one_block_in_ten_then_in_a_hundred() -> None:
    assert all(timeline.keep_step(n) for n in range(1000))
    assert [n for n in range(1000, 1200) if timeline.keep_step(n)] == [*range(1000, 1010), *range(1100, 1110)]
    assert timeline.keep_step(10000) and not timeline.keep_step(10100) and timeline.keep_step(11000)


def test_a_training_step_writes_its_phase_ranges_and_the_step(tl: Any) -> None:
    model = Logged(4, 2)
    opt = list(model.parameters())
    _step(tl, model, opt)
    _step(tl, model, opt)
    tl.drain()
    ranges = _records(tl, schema.K_RANGE)
    names = [(r["name"], r["cat"]) for r in ranges]
    assert names.count(("forward", "compute")) == 2 and names.count(("backward", "compute")) == 2
    assert names.count(("optimizer step", "optim")) == 2
    assert [r["payload"] for r in ranges if r["name"] == "step"] == [0, 1]
    assert all(r["t1"] >= r["t0"] for r in ranges)
    fwd, step0 = next(r for r in ranges if r["name"] == "forward"), next(r for r in ranges if r["name"] == "step")
    assert step0["t0"] <= fwd["t0"] and fwd["t1"] <= step0["t1"]  # the forward lies inside its step
    (info, info2) = _records(tl, schema.K_PROFILE_INFO)  # written after steps 1 and 2
    assert (info2["steps"], info2["kept_steps"], info2["forwards"], info2["bucket_ranges"]) == (2, 2, 2, False)
    assert (info2["buckets"], info2["bucket_cap_mb"]) == ([40, 8], 25.0)  # the rebuilt buckets
    assert info2["ddp"] == {"backward_ms": 2.5, "comm_ms": 1.0}  # a zero timer is not reported


def test_a_dataloader_wait_is_a_data_range_and_the_phase_goes_back(tl: Any) -> None:
    tl.phase = "other:optimizer"
    batches = list(DataLoader(list(range(4)), batch_size=2))
    assert [b.tolist() for b in batches] == [[0, 1], [2, 3]]
    assert tl.phase == "other:data"
    tl.drain()
    waits = [r for r in _records(tl, schema.K_RANGE) if r["name"] == "dataloader wait"]
    assert len(waits) == 3 and {r["cat"] for r in waits} == {"data"}  # two batches and the StopIteration


def test_a_step_not_kept_writes_no_ranges(tl: Any) -> None:
    tl.keep = False
    assert tl.start("forward", "compute") is None
    tl.end(None)
    tl.drain()
    assert _records(tl, schema.K_RANGE) == []
