"""DataLoader workers' copy-on-read growth (pytorch/pytorch#13246): a Dataset holding a list of dicts read by
2 workers per rank makes each worker's USS grow towards a copy of it while RSS stays flat; the same records
in numpy arrays, or read without workers, give no error. Real torchrun ranks on gloo, then hand-built runs for
the judgement's edges, and the rank side's look at a Dataset's attributes in-process."""

from __future__ import annotations

import json

from helpers import ROOT, ddpdoctor, finding, marker_line, script_argv

SCRIPT = ROOT / "tests" / "scripts" / "worker_records.py"
ID = "memleak.dataloader-workers"
MiB = 2**20


def errors(report):
    return [(f["id"], f["message"]) for f in report["findings"] if f["severity"] == "error"]


def run(tmp_path, *args, census_every=None):
    opts = ["--census-every", str(census_every)] if census_every else []
    return ddpdoctor(script_argv("memleak", str(SCRIPT), *opts, "--", *args), tmp_path, timeout=90)


def samples(run_dir, rank):
    lines = (run_dir / "ranks" / str(rank) / "memory.jsonl").read_text().splitlines()
    return [json.loads(l) for l in lines if '"worker_mem"' in l]


def test_list_of_dicts_is_copied_into_every_worker(tmp_path):
    # default settings: a census of 300,000 live dicts costs 1-2 s, and the early censuses stop once the probes
    # have taken 2 s (the worker samples do not depend on them)
    r = run(tmp_path, "--store", "list", "--workers", "2")
    assert r.code == 1, r.out + r.err[-2000:]
    f = finding(r.report, ID)
    assert f["ranks"] == [0, 1] and f["culprits"] == [0, 1]
    line = marker_line(SCRIPT, "RECORDS")
    assert {(l["rank"], l["line"], l["function"], l["role"]) for l in f["locations"]} == {
        (0, line, "__init__", "stores"),
        (1, line, "__init__", "stores"),
    }
    assert "`Records.records`" in f["message"] and "300,000 `dict`" in f["message"]
    assert "USS" in f["message"] and "RSS stayed flat" in f["message"] and "every rank" in f["message"]
    assert "numpy" in f["hint"]
    ev = f["evidence"]
    assert ev["cause"] == "copy-on-read" and len(ev["workers"]) == 4
    for w in ev["workers"]:  # each worker: USS up by tens of MiB, RSS within a few
        assert w["to"] - w["from"] >= 16 * MiB and abs(w["rss_to"] - w["rss_from"]) < 8 * MiB, w
    # one finding for the workers: the RSS-summed layer does not repeat it
    assert [x["id"] for x in r.report["findings"]].count(ID) == 1
    assert "private memory (USS, MiB) by step" in (r.run_dir / "report.html").read_text()


def test_same_records_in_numpy_arrays_give_no_error(tmp_path):
    r = run(tmp_path, "--store", "numpy", "--workers", "2")
    assert errors(r.report) == [] and r.code == 0, r.out
    for rank in (0, 1):  # the workers were sampled, and their USS stayed within a few MiB
        ss = samples(r.run_dir, rank)
        assert len(ss) >= 4, ss
        uss = {w["pid"]: [] for s in ss for w in s["w"]}
        for s in ss:
            for w in s["w"]:
                uss[w["pid"]].append(w["uss"])
        assert len(uss) == 2 and all(max(u) - u[0] < 16 * MiB for u in uss.values()), uss


def test_reading_in_the_rank_itself_gives_no_error(tmp_path):
    r = run(tmp_path, "--store", "list", "--workers", "0", "--records", "100000")
    assert errors(r.report) == [] and r.code == 0, r.out
    assert samples(r.run_dir, 0) == []


# -- the judgement on hand-built runs ------------------------------------------------------------------


def _workers_run(root, uss, rss, census_workers=None, passes=1):
    """Two ranks, one loader with one worker each (new workers at each of ``passes``); ``uss``/``rss``: the
    worker's figures (MiB) once a second."""
    from builder import RunBuilder

    from ddpdoctor.analysis import diagnose
    from ddpdoctor.analysis.config import Config
    from ddpdoctor.record.reader import load_run

    b = RunBuilder(root, command="memleak")
    for r in (0, 1):
        b.start(r)
        for k in range(passes):
            pid, t0 = 100 + r + 10 * k, 1.0 + k * len(uss)
            b.add(r, "memory.jsonl", "worker_pass", t0, loader=0, it=k, k=k, step=0, pids=[pid], stores=[])
            for i, (u, s) in enumerate(zip(uss, rss)):
                w = [{"pid": pid, "id": 0, "uss": u * MiB, "pss": u * MiB, "rss": s * MiB}]
                b.add(r, "memory.jsonl", "worker_mem", t0 + i, loader=0, it=k, k=k, step=i * 10, w=w)
        for s in range(1, 41):
            b.add(r, "memory.jsonl", "mem", 1.0 + s / 4, step=s, rss=300 * MiB)
            if census_workers and s % 4 == 0:
                b.census(r, 1.0 + s / 4, s, workers={str(100 + r): census_workers(s) * MiB})
        b.finish(r, 20.0)
    return [f for f in diagnose(load_run(str(root)), Config(), "memleak").findings if f.id.startswith("memleak.")]


def test_workers_own_allocations_that_keep_growing(tmp_path):
    grow = [20 + 8 * i for i in range(12)]
    fs = _workers_run(tmp_path, grow, [300 + u for u in grow])
    assert [f.id for f in fs] == [ID]
    assert fs[0].evidence["cause"] == "allocations" and "RSS grew with it" in fs[0].message


def test_a_buffer_filled_once_a_spike_or_a_few_mib_are_not_findings(tmp_path):
    filled = [20, 80, 80, 80, 80, 80, 80, 80]  # RSS rises with it, then both stay: the worker's buffers
    assert _workers_run(tmp_path / "filled", filled, [300 + u for u in filled]) == []
    spike = [20, 20, 90, 20, 20, 20, 20, 20]
    assert _workers_run(tmp_path / "spike", spike, [300] * len(spike)) == []
    few = [20, 22, 24, 26, 28, 30, 30, 30]
    assert _workers_run(tmp_path / "few", few, [300] * len(few)) == []
    # batches in flight: USS and RSS jump together by tens of MiB around a level that does not grow
    noisy = [20, 90, 30, 85, 40, 95, 35, 80, 30, 90, 40, 100]
    assert _workers_run(tmp_path / "noisy", noisy, [300 + u for u in noisy]) == []


def test_copy_on_read_is_reported_once_though_summed_worker_rss_grows(tmp_path):
    uss = [10, 40, 70, 90, 95, 95, 95, 95]
    fs = _workers_run(tmp_path, uss, [350] * len(uss), census_workers=lambda s: 300 + s)
    assert [f.id for f in fs] == [ID]
    assert fs[0].evidence["cause"] == "copy-on-read" and "RSS stayed flat" in fs[0].message
    assert "no attribute holding" in fs[0].message


def test_each_passs_new_workers_copy_again(tmp_path):
    uss = [10, 40, 70, 90, 95, 95]
    fs = _workers_run(tmp_path, uss, [350] * len(uss), passes=3)
    assert [f.id for f in fs] == [ID] and len(fs[0].evidence["workers"]) == 6
    assert "the new workers of 2 later passes copied again" in fs[0].message
    assert "2 worker(s) hold about 170 MiB of copies at once" in fs[0].message, fs[0].message


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
    me = str(ROOT / "tests" / "test_memleak_workers.py")
    assert (by["paths"]["file"], by["paths"]["line"]) == (
        me,
        marker_line(ROOT / "tests" / "test_memleak_workers.py", "PATHS"),
    )
    # the assignment that holds the objects, not the empty one before it
    assert by["meta"]["line"] == marker_line(ROOT / "tests" / "test_memleak_workers.py", "META")
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
