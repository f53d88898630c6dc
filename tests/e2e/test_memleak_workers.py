"""DataLoader workers' copy-on-read growth (pytorch/pytorch#13246): a Dataset holding a list of dicts read by
2 workers per rank makes each worker's USS grow towards a copy of it while RSS stays flat; the same records
in numpy arrays, or read without workers, give no error. Real torchrun ranks on gloo, then hand-built runs for
the judgement's edges, and the rank side's look at a Dataset's attributes in-process."""

from __future__ import annotations

import json

import pytest
from helpers import ROOT, ddpdoctor, finding, marker_line, script_argv

pytestmark = pytest.mark.extended  # three jobs with loader workers, 40 s of the README's run (stop 57)

SCRIPT = ROOT / "tests" / "scripts" / "worker_records.py"
ID = "memleak.dataloader-workers"
MiB = 2**20


def errors(report):
    return [(f["id"], f["message"]) for f in report["findings"] if f["severity"] == "error"]


def run(tmp_path, *args, census_every=None):
    opts = ["--census-every", str(census_every)] if census_every else []
    return ddpdoctor(
        script_argv("memleak", str(SCRIPT), *opts, "--", *args), tmp_path, timeout=240
    )  # a generous bound: 2 ranks with loader workers on a loaded 2-core host


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


# -- the rank side: which Dataset attribute holds the Python objects ------------------------------------
