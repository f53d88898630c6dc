"""An FSDP1 job (``FullyShardedDataParallel``, FULL_SHARD and NO_SHARD, 2 gloo ranks on CPU) under ``profile``
(issue 51): healthy, no error finding, its steps counted, its phases non-zero, and its sharding where a DDP
job's buckets are, in the summary and in the HTML report: FSDP1, its strategy, its wrapped modules and flat
parameters, the bytes sharded on rank 0, the time in its all-gathers and reduce-scatters (NO_SHARD: its
all-reduce).

Two jobs of ~10-20 s each: the extended tier."""

from __future__ import annotations

import pytest
from helpers import ROOT, ddpdoctor, finding, script_argv

SCRIPT = ROOT / "tests" / "scripts" / "fsdp1_steps.py"
STEPS = 40

pytestmark = pytest.mark.extended


# strategy -> (this rank's shard elements, FSDP1's collectives per step): FULL_SHARD halves each flat
# parameter (3 x (32 x 32 + 32) and 32 + 1 elements, the head's padded to 34) and all-gathers and
# reduce-scatters them; NO_SHARD keeps them whole and all-reduces the gradients
CASES = {"FULL_SHARD": (3 * 528 + 17, {"all-gather", "reduce-scatter"}), "NO_SHARD": (3 * 1056 + 33, {"all-reduce"})}


@pytest.mark.parametrize("strategy", sorted(CASES))
def test_a_healthy_fsdp1_job_is_profiled_with_its_sharding(tmp_path, strategy):
    argv = script_argv("profile", SCRIPT, "--", "--steps", str(STEPS), "--strategy", strategy)
    r = ddpdoctor(argv, tmp_path, timeout=240)
    assert r.report is not None, (r.out + r.err)[-3000:]
    errors = [(f["id"], f["message"]) for f in r.report["findings"] if f["severity"] == "error"]
    assert r.code == 0 and errors == [], (r.out + r.err)[-3000:]
    assert [x["detail"] for x in r.report["ranks"]] == [f"finished (exit code 0); {STEPS} steps"] * 2
    f = finding(r.report, "profile.summary")
    for rank in ("0", "1"):
        typical = f["evidence"]["typical_ms"][rank]
        assert min(typical[p] for p in ("forward", "backward+comm", "optimizer")) > 0, typical
    fsdp = f["evidence"]["fsdp"]
    elements, kinds = CASES[strategy]
    # the root and its three blocks: four FSDP units, each with a flat parameter (the root's holds the head)
    assert fsdp["kind"] == "FSDP1" and fsdp["strategies"] == {strategy: 4}, fsdp
    assert (fsdp["modules"], fsdp["flat_params"], fsdp["params"], fsdp["world"]) == (4, 4, 8, 2), fsdp
    assert fsdp["sharded_bytes"] == elements * 4, fsdp  # float32
    assert f"FSDP1: {strategy}, 4 FSDP module(s), 4 flat parameter(s) of 8 parameters" in f["message"], f["message"]
    assert "DDP buckets" not in f["message"] and "forwards per step 1.0" in f["message"], f["message"]
    comm = f["evidence"]["fsdp_comm_ms"]
    assert set(comm) == kinds and min(comm.values()) > 0, comm
    assert "in FSDP1's collectives per step (rank 0, inside forward and backward): " in f["message"]
    assert f["message"] in r.out  # the summary the user reads
    html = (r.run_dir / "report.html").read_text()
    assert '<h3>Sharding (FSDP1)</h3><table class="kv sharding" data-kind="FSDP1">' in html
    assert f"<tr><th>sharding strategy</th><td>{strategy} (4 flat parameter(s))</td></tr>" in html
