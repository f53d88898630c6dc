"""DataLoader workers' copy-on-read growth (pytorch/pytorch#13246): a Dataset holding a list of dicts read by
2 workers per rank makes each worker's USS grow towards a copy of it while RSS stays flat; the same records
in numpy arrays, or read without workers, give no error. Real torchrun ranks on gloo, then hand-built runs for
the judgement's edges, and the rank side's look at a Dataset's attributes in-process."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
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
    worker's USS/PSS/RSS, and the iterator's shutdown samples its workers once more before they exit (however
    far off the heartbeat's next sample is); a failing look at the Dataset is a probe_error (once), and the
    loader still runs."""
    from torch.utils.data import DataLoader, Dataset
    from torch.utils.data import dataloader as dl_mod

    from ddpdoctor.rank import failures
    from ddpdoctor.rank.cost import Cost
    from ddpdoctor.rank.probes.memleak import workers
    from ddpdoctor.record.writer import JsonlWriter

    class Plain(_Plain, Dataset):
        pass

    class Rank:
        rank = 0
        events = JsonlWriter(str(tmp_path / "events.jsonl"))
        main_ident = threading.get_ident()
        cost = Cost()

    cls = dl_mod._MultiProcessingDataLoaderIter
    monkeypatch.setattr(cls, "_reset", cls._reset)  # put back after the test: install() replaces it
    monkeypatch.setattr(cls, "_shutdown_workers", cls._shutdown_workers)
    monkeypatch.setattr(failures, "_said", set())
    w = workers.Workers(Rank(), JsonlWriter(str(tmp_path / "memory.jsonl")), lambda: 7)
    w.install()
    it = iter(DataLoader(Plain(20_000), batch_size=500, num_workers=1))
    next(it)
    w.tick()
    assert len(w.passes) == 1 and w.passes[0].n == 1
    w.next_due = float("inf")  # no heartbeat sample again: only the shutdown's
    assert len(list(it)) == 39  # the loader runs on; its worker shut down at the end
    assert w.passes == [] and Rank.cost.exact_ns > 0  # the end sample is the training thread's, counted exactly
    mem = [json.loads(l) for l in (tmp_path / "memory.jsonl").read_text().splitlines()]
    mem = [r for r in mem if r["kind"] == "worker_mem"]
    assert len(mem) == 2 and all(mem[1]["w"][0][k] > 0 for k in ("uss", "pss", "rss")), mem  # the tick's, the end's

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


def test_a_worker_whose_private_memory_reaches_a_new_high_makes_the_next_sample_dense(tmp_path):
    """A process that keeps 24 MiB more of its own memory between two samples has moved (the tick then samples
    again after DENSE_S, as at a pass's start); one that holds still has not."""
    from ddpdoctor.rank.probes.memleak import workers
    from ddpdoctor.record.writer import JsonlWriter

    grow = "import sys\nkept = []\nfor line in sys.stdin:\n    kept.append(b'x' * (24 << 20))\n    print('ok', flush=True)\n"
    proc = subprocess.Popen([sys.executable, "-c", grow], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:

        class Rank:
            rank = 0

        class It:
            pass

        it = It()
        w = workers.Workers(Rank(), JsonlWriter(str(tmp_path / "memory.jsonl")), lambda: 0)
        ps = workers._Pass(it, 0, 0, 0, [proc.pid])
        assert w._sample(ps) is False  # the first sample: nothing to compare with
        assert w._sample(ps) is False  # held still
        assert proc.stdin and proc.stdout
        proc.stdin.write("grow\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "ok"
        assert w._sample(ps) is True
        assert w._sample(ps) is False  # at its new high, not above it
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert w._sample(ps) is None  # its worker is gone: the pass has ended
