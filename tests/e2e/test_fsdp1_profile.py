"""An FSDP1 job (``FullyShardedDataParallel``, FULL_SHARD, 2 gloo ranks on CPU) under ``profile`` (issue 51):
healthy, no error finding, its steps counted, its phases non-zero, and its sharding where a DDP job's
buckets are, in the summary and in the HTML report: FSDP1, its strategy, its wrapped modules and flat
parameters, the time in its all-gathers and reduce-scatters.

One job of ~15-25 s: the extended tier."""

from __future__ import annotations

import pytest
from helpers import ROOT, ddpdoctor, finding, script_argv

SCRIPT = ROOT / "tests" / "scripts" / "fsdp1_steps.py"
STEPS = 40

pytestmark = pytest.mark.extended


def test_a_healthy_fsdp1_job_is_profiled_with_its_sharding(tmp_path):
    r = ddpdoctor(script_argv("profile", SCRIPT, "--", "--steps", str(STEPS)), tmp_path, timeout=240)
    assert r.report is not None, (r.out + r.err)[-3000:]
    errors = [(f["id"], f["message"]) for f in r.report["findings"] if f["severity"] == "error"]
    assert r.code == 0 and errors == [], (r.out + r.err)[-3000:]
    assert [x["detail"] for x in r.report["ranks"]] == [f"finished (exit code 0); {STEPS} steps"] * 2
    f = finding(r.report, "profile.summary")
    for rank in ("0", "1"):
        typical = f["evidence"]["typical_ms"][rank]
        assert min(typical[p] for p in ("forward", "backward+comm", "optimizer")) > 0, typical
    fsdp = f["evidence"]["fsdp"]
    # the root and its three blocks: four FSDP units, each with a flat parameter (the root's holds the head)
    assert fsdp["kind"] == "FSDP1" and fsdp["strategies"] == {"FULL_SHARD": 4}, fsdp
    assert (fsdp["modules"], fsdp["flat_params"], fsdp["params"], fsdp["world"]) == (4, 4, 8, 2), fsdp
    # float32 flat parameters of 3 x (32 x 32 + 32) and 32 + 1 elements, each in two equal shards (the
    # head's padded to 34): 3 x 528 + 17 elements on rank 0
    assert fsdp["sharded_bytes"] == (3 * 528 + 17) * 4, fsdp
    assert "FSDP1: FULL_SHARD, 4 FSDP module(s), 4 flat parameter(s) of 8 parameters" in f["message"], f["message"]
    assert "DDP buckets" not in f["message"] and "forwards per step 1.0" in f["message"], f["message"]
    comm = f["evidence"]["fsdp_comm_ms"]
    assert set(comm) == {"all-gather", "reduce-scatter"} and min(comm.values()) > 0, comm
    assert "in FSDP1's collectives per step (rank 0, inside forward and backward): all-gather" in f["message"]
    assert f["message"] in r.out  # the summary the user reads
    html = (r.run_dir / "report.html").read_text()
    assert '<h3>Sharding (FSDP1)</h3><table class="kv sharding" data-kind="FSDP1">' in html
    assert "<tr><th>sharding strategy</th><td>FULL_SHARD (4 flat parameter(s))</td></tr>" in html
