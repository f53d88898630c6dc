"""`ddpdoctor check` on scripts written the way people write them (the official DDP tutorial's Trainer,
evaluation loaders, pre-sharded data, two DDP models): healthy ones get no error, the planted fault gets
the right finding, culprits and lines. The hints are checked against the evidence on hand-built records."""

from __future__ import annotations

import textwrap

import pytest
from helpers import PROBES, ddpdoctor, finding, lines_of, marker_line


def errors(report: dict) -> list[str]:
    return [f["id"] for f in report["findings"] if f["severity"] == "error"]


def script(tmp_path, name: str, body: str):
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


def test_tutorial_trainer_with_peek_and_set_epoch_is_healthy(tmp_path):
    r = ddpdoctor(["check", str(PROBES / "check_tutorial_peek.py")], tmp_path)
    assert r.code == 0, r.out
    assert errors(r.report) == [] and "data.missing-set-epoch" not in [f["id"] for f in r.report["findings"]]


def test_tutorial_trainer_without_set_epoch(tmp_path):
    probe = PROBES / "check_tutorial_no_set_epoch.py"
    r = ddpdoctor(["check", str(probe)], tmp_path)
    assert r.code == 1, r.out
    f = finding(r.report, "data.missing-set-epoch")
    assert f["culprits"] == [0, 1]
    lines = {marker_line(probe, "SAMPLER"), marker_line(probe, "LOOP")}
    assert lines_of(f, 0) == lines and lines_of(f, 1) == lines
    assert f["evidence"]["training_epochs"] == 3 and f["evidence"]["peeks"] == 3
    assert "set_epoch is never called" in f["message"]


EVAL_LOADERS = """
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    train = TensorDataset(torch.randn(48, 8), torch.randn(48, 1))
    val = TensorDataset(torch.randn(20, 8), torch.randn(20, 1))
    tune = TensorDataset(torch.randn(16, 8), torch.randn(16, 1))
    ts = DistributedSampler(train)
    train_loader = DataLoader(train, batch_size=8, sampler=ts)
    val_loader = DataLoader(val, batch_size=5, sampler=DistributedSampler(val, shuffle=False))
    probe_loader = DataLoader(val, batch_size=5, sampler=DistributedSampler(val, shuffle=True))
    tune_loader = DataLoader(tune, batch_size=4, sampler=DistributedSampler(tune))
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def fit(loader):
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()

    for epoch in range(3):
        ts.set_epoch(epoch)
        fit(train_loader)
        with torch.no_grad():   # evaluation: no set_epoch on either sampler, shuffled or not
            for loader in (val_loader, probe_loader):
                for x, y in loader:
                    model(x)
    fit(tune_loader)            # one epoch only
    dist.destroy_process_group()
"""


def test_evaluation_samplers_and_single_epoch_are_not_flagged(tmp_path):
    r = ddpdoctor(["check", str(script(tmp_path, "eval_loaders.py", EVAL_LOADERS))], tmp_path)
    assert r.code == 0, r.out
    assert errors(r.report) == []


PRESHARDED = """
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, TensorDataset

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(5)
    x = torch.randn(64, 8, generator=g)
    shard = TensorDataset(x[rank::world], x[rank::world].sum(1, keepdim=True))  # each rank its own slice
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        for xb, yb in DataLoader(shard, batch_size=8, shuffle=True):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(xb), yb).backward()
            opt.step()
    dist.destroy_process_group()
"""


@pytest.mark.extended  # one of the README tier's slowest jobs (stop 57: the tier read 554-562 s)
def test_presharded_data_without_distributed_sampler_is_not_an_overlap(tmp_path):
    r = ddpdoctor(["check", str(script(tmp_path, "presharded.py", PRESHARDED))], tmp_path)
    assert r.code == 0, r.out
    assert "data.shard-overlap" not in [f["id"] for f in r.report["findings"]]
    # the same script with the slicing removed trains every rank on the same data
    same = script(tmp_path, "same.py", PRESHARDED.replace("x[rank::world], x[rank::world]", "x, x"))
    r = ddpdoctor(["check", str(same)], tmp_path)
    f = finding(r.report, "data.shard-overlap")
    assert f["culprits"] == [0, 1] and r.code == 1


GAN = """
    import torch, torch.distributed as dist, torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    G = DDP(nn.Sequential(nn.Linear(4, 16), nn.Tanh()))
    D = DDP(nn.Sequential(nn.Linear(16, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1)))
    optD, optG = torch.optim.Adam(D.parameters()), torch.optim.Adam(G.parameters())
    bce = nn.BCEWithLogitsLoss()
    for step in range(12):
        real = torch.randn(8, 16)
        D.zero_grad()
        bce(D(real), torch.ones(8, 1)).backward()
        fake = G(torch.randn(8, 4))
        bce(D(fake.detach()), torch.zeros(8, 1)).backward()
        optD.step()
        G.zero_grad()
        bce(D(fake), torch.ones(8, 1)).backward()
        optG.step()
    dist.destroy_process_group()
"""


@pytest.mark.extended  # one of the README tier's slowest jobs (stop 57: the tier read 554-562 s)
def test_two_ddp_models_gan_style(tmp_path):
    r = ddpdoctor(["check", str(script(tmp_path, "gan.py", GAN))], tmp_path)
    assert r.code == 0, r.out
    ids = [f["id"] for f in r.report["findings"]]
    assert errors(r.report) == [] and "perf.grad-accum-no-sync" not in ids


# -- hints against the evidence (hand-built records) ------------------------------------------------------
