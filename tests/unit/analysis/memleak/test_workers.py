"""DataLoader workers' copy-on-read growth (pytorch/pytorch#13246): a Dataset holding a list of dicts read by
2 workers per rank makes each worker's USS grow towards a copy of it while RSS stays flat; the same records
in numpy arrays, or read without workers, give no error. Real torchrun ranks on gloo, then hand-built runs for
the judgement's edges, and the rank side's look at a Dataset's attributes in-process."""

from __future__ import annotations

ID = "memleak.dataloader-workers"
MiB = 2**20


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
