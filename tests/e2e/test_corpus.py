"""The accuracy corpus (tests/corpus/), fast subset: realistic DDP scripts not written for the tool.

Healthy scripts must get no error-severity finding; planted faults must get the right finding id, culprit
rank and `# FAULT` line. The full corpus runs with `python benchmarks/accuracy.py` (docs/accuracy.md).
"""

from __future__ import annotations

import re
import sys

import pytest
from helpers import TESTS, ddpdoctor, finding

CORPUS = TESTS / "corpus"
sys.path.insert(0, str(CORPUS))
from cases import CASES  # noqa: E402

FAST = [c for c in CASES if c["fast"]]
HEALTHY = [c for c in FAST if not c["error_ids"] and not c["warn_ids"]]
FAULTS = [c for c in FAST if c["primary"]]


def run(tmp_path, case):
    args = [case["command"], "--nproc-per-node", str(case["nproc"]), *case["options"], str(CORPUS / case["script"])]
    args += case["args"]  # after the script, the script's (torchrun's rule)
    return ddpdoctor(args, tmp_path, timeout=180, cwd=tmp_path)


def fault_lines(case) -> set[int]:
    lines = set()
    for i, text in enumerate((CORPUS / case["script"]).read_text().splitlines(), 1):
        m = re.search(r"#\s*(FAULT(?:-[A-Z]+)?)\b", text)
        if m and m.group(1) in case["markers"]:
            lines.add(i)
    assert lines, f"no {case['markers']} marker in {case['script']}"
    return lines


def culprits(f) -> list[int]:
    """The finding's culprits; where the field is still empty, the ranks of its culprit-role locations."""
    if f.get("culprits"):
        return sorted(f["culprits"])
    return sorted({l["rank"] for l in f["locations"] if not l["role"].startswith(("waiting", "victim"))})


def test_fast_subset_is_small_and_mixed():
    assert 4 <= len(FAST) <= 8 and HEALTHY and FAULTS


@pytest.mark.parametrize("case", HEALTHY, ids=[c["id"] for c in HEALTHY])
def test_healthy_script_gets_no_error(tmp_path, case):
    r = run(tmp_path, case)
    assert r.report is not None, r.err[-2000:]
    errors = [(f["id"], f["message"]) for f in r.report["findings"] if f["severity"] == "error"]
    assert errors == [], r.err[-2000:]
    assert r.report["verdict"] == "ok" and r.code == 0, r.err[-2000:]
    # issue 37: every report states ddpdoctor's own cost, and on these scripts it stays small
    cost = r.report["cost"]
    assert "ddpdoctor's cost: " in r.out and " µs/step on the training thread (" in r.out, r.out
    assert set(cost["ranks"]) == {str(i) for i in range(case["nproc"])}, cost
    assert 0 < cost["train_us_per_step"] and cost["train_pct"] <= 5.0 and cost["background_pct"] <= 10.0, cost


@pytest.mark.parametrize("case", FAULTS, ids=[c["id"] for c in FAULTS])
def test_planted_fault_is_named_with_rank_and_line(tmp_path, case):
    r = run(tmp_path, case)
    assert r.report is not None, r.err[-2000:]
    assert (r.report["verdict"], r.code) == (case["verdict"], case["exit_code"]), r.err[-2000:]
    f = finding(r.report, case["primary"])
    got = culprits(f)
    assert got in [sorted(c) for c in case["culprits"]], f["locations"]
    script = str(CORPUS / case["script"])
    named = {l["line"] for l in f["locations"] if l["file"] == script and l["rank"] in got}
    assert named & fault_lines(case), (named, f["locations"])
    errors = {x["id"] for x in r.report["findings"] if x["severity"] == "error"}
    assert errors - case["error_ids"] - case["tolerate"] == set()
