"""`ddpdoctor compare BASE.json NEW.json`: the figures of profile and memleak reports, a table per rank and
phase, exit 1 on a regression, 0 otherwise, 2 on bad input."""

from __future__ import annotations

import copy
import json

from helpers import ddpdoctor


def _write(path, data):
    path.write_text(json.dumps(data))
    return str(path)


def test_profile_report_carries_step_figures_and_compare_gates_step_time(tmp_path, shared_job):
    """The healthy probe's profile report; test_profile.py reads the same job (shared_job)."""
    r = shared_job.run(["profile", "--probe", "healthy", "--", "--epochs", "6"])
    assert r.report is not None, r.err[-2000:]
    steps = r.report["figures"]["step_ms"]
    assert set(steps) == {"0", "1"}
    for m in steps.values():
        assert m["step"] > 0 and {"data", "forward", "backward+comm", "optimizer", "other"} <= set(m)
    base = _write(tmp_path / "base.json", r.report)
    same = ddpdoctor(["compare", base, base], tmp_path, json_report=False)
    assert same.code == 0 and "OK (exit code 0)" in same.out, same.out + same.err
    slow = copy.deepcopy(r.report)
    slow["figures"]["step_ms"]["1"]["step"] *= 1.3
    slow["figures"]["step_ms"]["1"]["forward"] += 0.3 * r.report["figures"]["step_ms"]["1"]["step"]
    new = _write(tmp_path / "new.json", slow)
    res = ddpdoctor(["compare", base, new, "--max-step-time-regression", "20"], tmp_path, json_report=False)
    assert res.code == 1, res.out + res.err
    row = next(l for l in res.out.splitlines() if l.split()[:2] == ["1", "step"])
    assert "+30.0%" in row and "REGRESSION" in row
    assert "most of the growth" in next(l for l in res.out.splitlines() if l.split()[:2] == ["1", "forward"])
    assert not any("REGRESSION" in l for l in res.out.splitlines() if l.split()[:1] == ["0"])
    assert ddpdoctor(["compare", base, new, "--max-step-time-regression", "40"], tmp_path, json_report=False).code == 0
