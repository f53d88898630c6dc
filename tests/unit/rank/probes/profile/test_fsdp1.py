"""The profile probe on a real FSDP1 model (``FullyShardedDataParallel``, issue 51) in a one-rank gloo world:
its sharding read from FSDP1's own state into ``profile_info`` once, after the first step, and the ranges of
its collectives. FSDP1 clamps every strategy to NO_SHARD at world size 1 (its gradients are all-reduced,
never all-gathered); the two-rank FULL_SHARD job is tests/e2e/test_fsdp1_profile.py. Everything wrapped is
put back after."""

from __future__ import annotations

import datetime
import warnings
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
from ddpdoctor.record import schema

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed with gloo is needed"
)


@pytest.fixture
def tl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from torch.distributed.fsdp import _flat_param, _runtime_utils
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group

    assert not dist.is_initialized()
    monkeypatch.delenv("NVTX_INJECTION64_PATH", raising=False)
    monkeypatch.delenv("NVTX_INJECTION32_PATH", raising=False)
    monkeypatch.setattr(torch.autograd, "backward", torch.autograd.backward)
    monkeypatch.setattr(dl_mod._BaseDataLoaderIter, "__next__", dl_mod._BaseDataLoaderIter.__next__)
    monkeypatch.setattr(DDP, "register_comm_hook", DDP.register_comm_hook)
    # torch's own functions, for this test's timeline to wrap: an earlier test's timeline (its install waits
    # for FSDP's import when FSDP is not loaded yet) may have wrapped them at the import above
    for owner, name in (
        (_flat_param.FlatParamHandle, "_all_gather_flat_param"),
        (_runtime_utils, "_reduce_grad"),
        (_runtime_utils, "_reduce_grad_no_shard"),
        (_fsdp_param_group.FSDPParamGroup, "unshard"),
        (_fsdp_param_group.FSDPParamGroup, "wait_for_unshard"),
        (_fsdp_param_group.FSDPParamGroup, "post_backward"),
    ):
        fn = getattr(owner, name)
        while getattr(fn, "__ddpdoctor_timeline__", False):
            fn = fn.__wrapped__
        monkeypatch.setattr(owner, name, fn)
    p = fakeprobe.make_probe(tmp_path)
    monkeypatch.setattr(active, "probe", p)
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=20))
    try:
        yield timeline.install(p, {"sample_ms": 0})
    finally:
        dist.destroy_process_group()
        fakeprobe.close(p)


def _model() -> Any:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import MixedPrecision

    cpu = torch.device("cpu")
    mp = MixedPrecision(reduce_dtype=torch.float32, buffer_dtype=torch.float32)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    with warnings.catch_warnings():  # "switching to use NO_SHARD ... since the world size is 1"
        warnings.simplefilter("ignore", UserWarning)
        model[0] = FSDP(model[0], device_id=cpu, use_orig_params=True, mixed_precision=mp)
        return FSDP(model, device_id=cpu, use_orig_params=True, mixed_precision=mp)


def _step(tl: Any, model: Any) -> None:
    tl.on_forward(model)
    loss = model(torch.ones(3, 4)).sum()
    tl.after_forward(model)
    loss.backward()
    with torch.no_grad():  # SGD by hand: torch.optim's first step imports torch._dynamo (seconds)
        for w in model.parameters():
            w -= 0.1 * w.grad
            w.grad = None
    tl.after_step(tl.step + 1)


def test_an_fsdp1_root_is_summarised_once_from_its_own_state(tl: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model()
    _step(tl, model)
    assert tl.fsdp_read is not None  # read after the first step: FSDP1's lazy init has run

    def read_again(_root: Any) -> dict:
        raise AssertionError("the FSDP1 sharding is read once")

    monkeypatch.setattr(timeline, "fsdp1_sharding", read_again)
    _step(tl, model)
    tl.drain()
    infos = fakeprobe.kinds(fakeprobe.records(tl.p, schema.TIMELINE), schema.K_PROFILE_INFO)
    assert [i["steps"] for i in infos] == [1, 2]
    # 4x4 + 4 and 4x2 + 2 float32 parameters, in two flat parameters, whole on the only rank
    assert infos[1]["fsdp"] == {
        "kind": "FSDP1",
        "strategies": {"NO_SHARD": 2},
        "modules": 2,
        "flat_params": 2,
        "params": 4,
        "sharded_bytes": (20 + 10) * 4,
        "world": 1,
        "mp": {"reduce_dtype": "float32", "buffer_dtype": "float32"},
        "use_orig_params": True,
        "cpu_offload": False,
    }
    assert infos[0]["fsdp"] == infos[1]["fsdp"]
    names = [r["name"] for r in fakeprobe.kinds(fakeprobe.records(tl.p, schema.TIMELINE), schema.K_RANGE)]
    # NO_SHARD: each flat parameter's gradient all-reduced once a step, nothing all-gathered
    assert names.count("fsdp all-reduce") == 4 and "fsdp all-gather" not in names, names
