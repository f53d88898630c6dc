"""Golden run directories: records of real probe runs (tests/golden/<name>/, re-recorded by
tests/golden/record.sh), analyzed again by ``ddpdoctor analyze``. No rank runs, no torch: a change of the
analysis or of the record format that changes a verdict shows up here in seconds."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import ROOT, TESTS, ddpdoctor, finding, lines_of, marker_line

ROOT = ROOT
GOLDEN = TESTS / "golden"

# name -> (exit code, finding id or None, culprit ranks, probe, [(rank, marker)])
CASES = {
    "healthy": (0, None, (), "healthy.py", []),
    "check_set_epoch": (1, "data.missing-set-epoch", (0, 1), "check_set_epoch.py", [(0, "SAMPLER"), (1, "LOOP")]),
    "rank_conditional": (3, "hang.rank-conditional-collective", (0,), "rank_conditional.py", [(0, "EXTRA")]),
    "leak_graph": (1, "memleak.autograd-graph", (0, 1), "leak_graph.py", [(0, "ACCUM"), (1, "ACCUM")]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_run_directory(tmp_path, name):
    code, fid, culprits, probe, marks = CASES[name]
    src = GOLDEN / name
    if not src.is_dir():
        pytest.fail(f"{src} is missing: run tests/golden/record.sh")
    run = tmp_path / name
    shutil.copytree(src, run)  # analyze writes its pictures into the run directory
    r = ddpdoctor(["analyze", str(run)], tmp_path, timeout=60, cwd=ROOT)
    assert r.report is not None, r.err[-2000:]
    assert r.code == code, (r.code, [(f["id"], f["severity"]) for f in r.report["findings"]])
    errors = [f["id"] for f in r.report["findings"] if f["severity"] == "error"]
    if fid is None:
        assert errors == [], errors
        return
    f = finding(r.report, fid)
    assert f["severity"] == "error"
    assert tuple(f["culprits"]) == culprits
    for rank, marker in marks:
        line = marker_line(ROOT / "probes" / probe, marker)
        assert line in lines_of(f, rank), (marker, line, f["locations"])
        assert all(Path(l["file"]).name == probe for l in f["locations"] if l["line"] == line)
