"""`ddpdoctor check` on scripts written the way people write them (the official DDP tutorial's Trainer,
evaluation loaders, pre-sharded data, two DDP models): healthy ones get no error, the planted fault gets
the right finding, culprits and lines. The hints are checked against the evidence on hand-built records."""

from __future__ import annotations

from builder import RunBuilder

from ddpdoctor.analysis.check import data as data_mod
from ddpdoctor.analysis.config import Config
from ddpdoctor.record.reader import load_run

# -- hints against the evidence (hand-built records) ------------------------------------------------------


def _loader(b, rank, t, ordinal=0, **kw):
    fields = dict(
        lid=100 + ordinal,
        ordinal=ordinal,
        sampler="DistributedSampler",
        sampler_sid=7,
        distributed=True,
        shuffle=True,
        iterable=False,
        dataset="D",
        dataset_len=40,
        batches=5,
        batch_size=4,
        drop_last=False,
        num_workers=0,
        prefetch=0,
        subset_digest=None,
        subset=None,
        data_fp="f",
        site=["/work/train.py", 12, "main"],
    )
    fields.update(kw)
    b.add(rank, "checks.jsonl", "loader", t, **fields)
    b.add(rank, "checks.jsonl", "loader_train", t + 0.1, ordinal=ordinal, by="step")
    b.add(rank, "checks.jsonl", "optstep", t + 0.2, n=1, synced=1, unsynced=0, site=["/work/train.py", 20, "main"])


def test_uneven_batches_hint_fits_a_script_that_uses_distributed_sampler(tmp_path):
    b = RunBuilder(tmp_path / "run", command="check")
    for r, (n, batches) in enumerate(((40, 5), (48, 6))):
        b.start(r)
        _loader(b, r, 1.0, dataset_len=n, batches=batches)
    f = next(f for f in data_mod.detect(load_run(tmp_path / "run"), Config()) if f.id == "data.uneven-batches")
    assert "DistributedSampler" not in f.hint.replace("DistributedSampler then", "")
    assert "different lengths" in f.message and "model.join()" in f.hint
    assert f.culprits == (1,)
    # same data set length, same batch size: the advice is drop_last or join
    b2 = RunBuilder(tmp_path / "run2", command="check")
    for r, batches in enumerate((5, 6)):
        b2.start(r)
        _loader(b2, r, 1.0, batches=batches)
    f = next(f for f in data_mod.detect(load_run(tmp_path / "run2"), Config()) if f.id == "data.uneven-batches")
    assert "drop_last=True" in f.hint and "model.join()" in f.hint and "Use DistributedSampler" not in f.hint


def test_shard_overlap_names_different_dataset_lengths_not_seeds(tmp_path):
    b = RunBuilder(tmp_path / "run", command="check")
    for r, n in enumerate((8, 10)):
        b.start(r)
        idx = list(range(r, n, 2))[:4] if r == 0 else [0, 2, 4, 6, 8]
        b.add(
            r,
            "checks.jsonl",
            "sampler_init",
            0.5,
            sid=7,
            ordinal=0,
            shuffle=False,
            seed=0,
            drop_last=False,
            num_replicas=2,
            sampler_rank=r,
            dataset_len=n,
            site=["/work/train.py", 9, "main"],
        )
        b.add(
            r,
            "checks.jsonl",
            "sampler",
            1.0,
            sid=7,
            ordinal=0,
            k=0,
            epoch=0,
            seed=0,
            shuffle=False,
            drop_last=False,
            num_replicas=2,
            sampler_rank=r,
            dataset_len=n,
            n=len(idx),
            digest=f"d{r}",
            indices=idx,
            site=["/work/train.py", 15, "main"],
        )
    f = next(f for f in data_mod.detect(load_run(tmp_path / "run"), Config()) if f.id == "data.shard-overlap")
    assert "different lengths" in f.message and "seed" not in f.hint
    assert f.evidence["dataset_lens"] == {0: 8, 1: 10}
    assert {l.line for l in f.locations} == {9}
