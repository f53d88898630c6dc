"""An FSDP2 job (``fully_shard``, 2 gloo ranks on CPU) under every command, as a DDP job is (issue 51; the
step notion of rank/steps.py): healthy, it gets no error finding, its steps are counted (the ranks table
and the memory series), profile's phases are non-zero and its summary shows the sharding where a DDP job's
buckets are, with the time in FSDP2's all-gathers and reduce-scatters; with one rank sleeping in its
forward, profile names that rank, the phase and the line.

Five jobs of ~15-25 s each: the extended tier.
"""

from __future__ import annotations

import json

import pytest
from helpers import ROOT, ddpdoctor, finding, marker_line, script_argv

SCRIPT = ROOT / "tests" / "scripts" / "fsdp2_steps.py"
STEPS = 40

pytestmark = pytest.mark.extended


def _errors(report: dict) -> list[tuple[str, str]]:
    return [(f["id"], f["message"]) for f in report["findings"] if f["severity"] == "error"]


@pytest.mark.parametrize("command", ["hang", "check", "memleak", "profile"])
def test_a_healthy_fsdp2_job_is_healthy_and_its_steps_are_counted(tmp_path, command):
    r = ddpdoctor(script_argv(command, SCRIPT, "--", "--steps", str(STEPS)), tmp_path, timeout=240)
    assert r.report is not None, (r.out + r.err)[-3000:]
    assert r.code == 0 and _errors(r.report) == [], (r.out + r.err)[-3000:]
    assert [x["detail"] for x in r.report["ranks"]] == [f"finished (exit code 0); {STEPS} steps"] * 2
    assert "(no steps)" not in r.out  # the cost line is per step
    if command == "memleak":  # one memory line per step for the first steps (then sampled)
        for rank in (0, 1):
            lines = (r.run_dir / "ranks" / str(rank) / "memory.jsonl").read_text().splitlines()
            steps = [json.loads(x)["step"] for x in lines if '"kind":"mem"' in x]
            assert steps == list(range(1, STEPS + 1)), steps
    if command == "profile":
        f = finding(r.report, "profile.summary")
        for rank in ("0", "1"):
            typical = f["evidence"]["typical_ms"][rank]
            assert min(typical[p] for p in ("forward", "backward+comm", "optimizer")) > 0, typical
        fsdp = f["evidence"]["fsdp"]
        assert fsdp["modules"] == 4 and fsdp["mesh"] == {"shape": [2], "dims": ["dp"]} and fsdp["params"] == 8
        assert "FSDP2: 4 sharded module(s)" in f["message"] and "DDP buckets" not in f["message"]
        assert "all-gather" in f["message"] and "reduce-scatter" in f["message"], f["message"]
        assert "forwards per step 1.0" in f["message"], f["message"]


def test_a_rank_slow_in_its_forward_is_named_with_the_phase_and_line(tmp_path):
    r = ddpdoctor(script_argv("profile", SCRIPT, "--", "--slow-rank", "1"), tmp_path, timeout=240)
    assert r.code == 0, (r.out + r.err)[-3000:]
    f = finding(r.report, "profile.straggler")
    assert f["culprits"] == [1] and f["evidence"]["rank"] == 1 and f["evidence"]["phase"] == "forward", f
    slow = {(l["rank"], l["line"]) for l in f["locations"] if l["role"] == "slow"}
    assert slow == {(1, marker_line(SCRIPT, "SLOW"))}, f["locations"]
