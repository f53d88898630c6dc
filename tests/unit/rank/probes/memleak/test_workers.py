"""DataLoader workers' copy-on-read growth (pytorch/pytorch#13246): a Dataset holding a list of dicts read by
2 workers per rank makes each worker's USS grow towards a copy of it while RSS stays flat; the same records
in numpy arrays, or read without workers, give no error. Real torchrun ranks on gloo, then hand-built runs for
the judgement's edges, and the rank side's look at a Dataset's attributes in-process."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import marker_line

# -- the judgement on hand-built runs ------------------------------------------------------------------


# -- the rank side: which Dataset attribute holds the Python objects ------------------------------------


class _Plain:  # module-level so that its methods are this (user) file's code
    def __init__(self, n):
        import numpy as np

        self.labels = np.arange(n)  # a numpy array: no Python objects per sample
        self.small = [1, 2, 3]
        self.paths = [f"/data/img-{i}.jpg" for i in range(n)]  # PATHS
        self.meta = {}
        self.meta = {i: (i, str(i)) for i in range(n)}  # META

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return self.paths[i]


def test_stores_found_through_subset_and_concat_wrappers():
    import numpy as np
    from torch.utils.data import ConcatDataset, Dataset, Subset

    from ddpdoctor.rank.probes.memleak import workers

    class Plain(_Plain, Dataset):
        pass

    objs = Plain(50_000)
    objs.rows = np.array([{"a": i} for i in range(20_000)], dtype=object)
    ds = Subset(ConcatDataset([objs, Plain(10)]), list(range(100)))
    found = workers.stores(ds)
    by = {s["attr"]: s for s in found}
    assert set(by) == {"paths", "meta", "rows"}, found
    assert by["paths"]["container"] == "list" and by["paths"]["elem"] == "str" and by["paths"]["len"] == 50_000
    assert by["meta"]["elem"] == "tuple" and by["rows"]["container"] == "ndarray" and by["rows"]["elem"] == "dict"
    me = Path(__file__)  # _Plain's stores are assigned in this file
    assert (by["paths"]["file"], by["paths"]["line"]) == (str(me), marker_line(me, "PATHS"))
    # the assignment that holds the objects, not the empty one before it
    assert by["meta"]["line"] == marker_line(me, "META")
    assert found == sorted(found, key=lambda s: -s["bytes"])


def test_rank_side_samples_a_loaders_workers_and_says_when_it_fails(tmp_path, monkeypatch):
    """In-process: the wrapped iterator reset records the pass and the Dataset's stores, a tick samples the
    worker's USS/PSS/RSS; a failing look at the Dataset is a probe_error (once), and the loader still runs."""
    from torch.utils.data import DataLoader, Dataset
    from torch.utils.data import dataloader as dl_mod

    from ddpdoctor.rank import failures
    from ddpdoctor.rank.probes.memleak import workers
    from ddpdoctor.record.writer import JsonlWriter

    class Plain(_Plain, Dataset):
        pass

    class Rank:
        rank = 0
        events = JsonlWriter(str(tmp_path / "events.jsonl"))

    cls = dl_mod._MultiProcessingDataLoaderIter
    monkeypatch.setattr(cls, "_reset", cls._reset)  # put back after the test: install() replaces it
    monkeypatch.setattr(failures, "_said", set())
    w = workers.Workers(Rank(), JsonlWriter(str(tmp_path / "memory.jsonl")), lambda: 7)
    w.install()
    it = iter(DataLoader(Plain(20_000), batch_size=500, num_workers=1))
    next(it)
    w.tick()
    assert len(list(it)) == 39  # the loader runs on; its worker shut down at the end
    w.next_due = 0.0  # the next sample is due now rather than in DENSE_S
    w.tick()
    assert w.passes == []

    def broken(ds):
        raise RuntimeError("broken on purpose by the test")

    monkeypatch.setattr(workers, "stores", broken)
    for _ in range(2):  # two loaders, one report
        assert len(list(DataLoader(Plain(2_000), batch_size=500, num_workers=1))) == 4
    recs = [json.loads(l) for l in (tmp_path / "memory.jsonl").read_text().splitlines()]
    passes = [r for r in recs if r["kind"] == "worker_pass"]
    assert [p["loader"] for p in passes] == [0, 1, 2] and len(passes[0]["pids"]) == 1
    assert {s["attr"] for s in passes[0]["stores"]} == {"paths", "meta"} and "stores" not in passes[1]
    mem = [r for r in recs if r["kind"] == "worker_mem"]
    assert mem and mem[0]["step"] == 7 and mem[0]["w"][0]["pid"] == passes[0]["pids"][0]
    assert all(mem[0]["w"][0][k] > 0 for k in ("uss", "pss", "rss"))
    errs = [json.loads(l) for l in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [(e["where"], "broken on purpose" in e["error"]) for e in errs] == [("memleak Dataset stores", True)]
