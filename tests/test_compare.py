"""`ddpdoctor compare BASE.json NEW.json`: the figures of profile and memleak reports, a table per rank and
phase, exit 1 on a regression, 0 otherwise, 2 on bad input."""

from __future__ import annotations

import copy
import json

from builder import RunBuilder
from helpers import ddpdoctor

from ddpdoctor.analysis import diagnose
from ddpdoctor.analysis.config import Config
from ddpdoctor.record.reader import load_run
from ddpdoctor.render.json_report import to_dict


def _write(path, data):
    path.write_text(json.dumps(data))
    return str(path)


def test_profile_report_carries_step_figures_and_compare_gates_step_time(tmp_path):
    r = ddpdoctor(["profile", "--steps", "10", "--probe", "healthy"], tmp_path)
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


def _memleak_record(tmp_path, name, per_step):
    b = RunBuilder(tmp_path / name, command="memleak")
    for r in (0, 1):
        b.start(r)
        for s in range(1, 31):
            b.add(r, "memory.jsonl", "mem", float(s), step=s, rss=300 * 2**20 + s * per_step * (r == 1))
        b.finish(r, 40.0)
    return to_dict(diagnose(load_run(str(tmp_path / name)), Config(), "memleak"))


def test_memleak_figures_and_memory_slope_gate(tmp_path):
    base = _memleak_record(tmp_path, "base", 0)
    new = _memleak_record(tmp_path, "new", 2**20)
    assert base["figures"]["memory"]["1"]["rss_bytes_per_step"] == 0
    assert new["figures"]["memory"]["1"]["rss_bytes_per_step"] == 2**20
    b, n = _write(tmp_path / "b.json", base), _write(tmp_path / "n.json", new)
    res = ddpdoctor(["compare", b, n, "--max-memory-slope-regression", "256K"], tmp_path, json_report=False)
    assert res.code == 1 and "rank 1 rss growth 0 B -> 1.00 MiB per step" in res.out, res.out + res.err
    assert ddpdoctor(["compare", b, n, "--max-memory-slope-regression", "2M"], tmp_path, json_report=False).code == 0


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    not_json = tmp_path / "x.json"
    not_json.write_text("{")
    no_figs = _write(
        tmp_path / "old.json", {"schema": "ddpdoctor.report", "version": 2, "command": "hang", "findings": []}
    )
    for args in (
        ["compare", str(not_json), str(not_json)],
        ["compare", no_figs, no_figs],
        ["compare", str(tmp_path / "missing.json"), no_figs],
    ):
        res = ddpdoctor(args, tmp_path, json_report=False)
        assert res.code == 2, (args, res.err)
        assert res.err.startswith("ddpdoctor: error:") and len(res.err.strip().splitlines()) == 1, res.err
