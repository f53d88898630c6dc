"""memleak's holder cases on a busy host (issue 37): with a busy loop on every core beside the job (started
and ended here, by pid), each case gives the verdict a quiet host gives (tests/e2e/test_memleak.py,
test_memleak_holders.py, test_memleak_workers.py): the same finding id, ranks and storing line. The
census and holder search keep a floor of evidence counted in steps, so contention costs time, never the
holder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers import PROBES, ROOT, cpu_hog, ddpdoctor, finding, marker_line, script_argv

SCRIPTS = ROOT / "tests" / "scripts"


# one worker runs the module fixture once; `loaded`: deselected from the default run (pyproject.toml), run alone
pytestmark = [pytest.mark.xdist_group("memleak-loaded"), pytest.mark.loaded]

CASES = {
    "losses": script_argv("memleak", str(PROBES / "leak_trainer_losses.py"), "--", "4"),
    "hook": script_argv("memleak", str(SCRIPTS / "memleak" / "trainer_hook_logits.py")),
    "workers": script_argv("memleak", str(SCRIPTS / "worker_records.py"), "--", "--store", "list", "--workers", "2"),
}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The three cases run side by side (each a 2-rank job under ddpdoctor) with one busy loop per core (at
    least two) beside them for the whole time: each its own process group, ended by pid. Three jobs and the
    loops on this host's two cores are more contention than one job beside the loops, in less wall time."""
    hogs = [cpu_hog() for _ in range(max(2, os.cpu_count() or 2))]
    try:
        with ThreadPoolExecutor(len(CASES)) as pool:
            futures = {
                name: pool.submit(ddpdoctor, argv, tmp_path_factory.mktemp(name), timeout=300)
                for name, argv in CASES.items()
            }
            yield {name: f.result() for name, f in futures.items()}
    finally:
        for h in hogs:
            h.kill()
            h.wait(timeout=10)


def _ids(r):
    return [f["id"] for f in r.report["findings"]]


def test_a_loss_list_in_a_trainer_attribute_names_both_ranks_and_the_line(loaded):
    r = loaded["losses"]
    assert r.code == 1, r.out + r.err[-3000:]
    f = finding(r.report, "memleak.autograd-graph")
    line = marker_line(PROBES / "leak_trainer_losses.py", "KEEP")
    assert f["culprits"] == [0, 1] and f["ranks"] == [0, 1], f
    assert {(l["rank"], l["line"], l["function"]) for l in f["locations"]} == {
        (0, line, "_run_batch"),
        (1, line, "_run_batch"),
    }, f
    assert "`self.losses`" in f["message"] and "memleak.rss" not in _ids(r)


def test_a_hook_cache_on_rank_0_names_rank_0_only_and_the_hook(loaded):
    script = SCRIPTS / "memleak" / "trainer_hook_logits.py"
    r = loaded["hook"]
    assert r.code == 1, r.out + r.err[-3000:]
    f = finding(r.report, "memleak.autograd-graph")
    assert f["culprits"] == [0] and f["ranks"] == [0], f
    assert [(l["rank"], l["line"], l["function"]) for l in f["locations"]] == [
        (0, marker_line(script, "LEAK"), "on_train_batch_end")
    ], f
    assert "`self._epoch_logits`" in f["message"] and "memleak.rss" not in _ids(r)


def test_dataloader_copy_on_read_names_the_dataset_attribute_on_both_ranks(loaded):
    script = SCRIPTS / "worker_records.py"
    r = loaded["workers"]
    assert r.code == 1, r.out + r.err[-3000:]
    f = finding(r.report, "memleak.dataloader-workers")
    assert f["culprits"] == [0, 1] and f["ranks"] == [0, 1], f
    line = marker_line(script, "RECORDS")
    assert {(l["rank"], l["line"], l["function"]) for l in f["locations"]} == {
        (0, line, "__init__"),
        (1, line, "__init__"),
    }, f
    assert "`Records.records`" in f["message"]
