"""Property tests of the figures a report shows: the parts of a step add up to the step (in the figures and
in the printed line), a growth rate is the same in the finding, the JSON figures and `compare`'s unit, and
a chart of magnitudes starts at 0. Random inputs from fixed seeds (no new dependency), plus recorded runs."""

from __future__ import annotations

import random
import re
import shutil
import statistics

import pytest
from helpers import ROOT

from ddpdoctor.analysis import diagnose
from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.figures import compute
from ddpdoctor.analysis.memleak.evidence import FULL_HORIZON
from ddpdoctor.analysis.memleak.evidence import about as _about
from ddpdoctor.analysis.memleak.evidence import project as _project
from ddpdoctor.analysis.profile import detect as profile_detect
from ddpdoctor.analysis.profile.steps import PHASES, breakdown, rounded_parts, steady, typical, typical_step
from ddpdoctor.record.reader import RankRecord, RunRecord, load_run
from ddpdoctor.render.svg import line_chart
from ddpdoctor.units import size

SEEDS = range(60)
MS = 1_000_000  # ns


def timeline(rng: random.Random, steps: int) -> list[dict]:
    """A rank's ranges: each step's phases with random lengths, gaps between them (the step's "other") and
    now and then a slow step, a Python collective or a data wait."""
    out, t = [], 1_000 * MS
    for _ in range(steps):
        t0 = t
        for name, cat in (("dataloader wait", "data"), ("forward", "compute"), ("backward", "compute"),
                          ("optimizer step", "optim")):  # fmt: skip
            if name == "dataloader wait" and rng.random() < 0.5:
                continue
            t += int(rng.uniform(0, 0.5) * MS)  # a gap: time in no phase
            ms = rng.uniform(0.05, 8.0) * (10 if rng.random() < 0.05 else 1)
            out.append({"kind": "range", "name": name, "cat": cat, "tid": 1, "t0": t, "t1": t + int(ms * MS)})
            t += int(ms * MS)
        if rng.random() < 0.3:
            ms = rng.uniform(0.01, 2.0)
            out.append(
                {"kind": "range", "name": "all_reduce", "cat": "comm", "tid": 1, "t0": t, "t1": t + int(ms * MS)}
            )
            t += int(ms * MS)
        t += int(rng.uniform(0, 1.0) * MS)
        out.append({"kind": "range", "name": "step", "cat": None, "tid": 1, "t0": t0, "t1": t})
    return out


def record_of(timelines: dict[int, list[dict]]) -> RunRecord:
    return RunRecord("/nonexistent", {"command": "profile"}, {r: RankRecord(rank=r, timeline=tl) for r, tl in timelines.items()}, [])  # fmt: skip


@pytest.mark.parametrize("seed", SEEDS)
def test_the_parts_of_a_step_add_up_to_the_step(seed):
    rng = random.Random(seed)
    rows = steady(breakdown(timeline(rng, rng.randint(1, 80))))
    t = typical_step(rows)
    assert all(t[p] >= 0 for p in PHASES)
    assert abs(sum(t[p] for p in PHASES) - t["step"]) < 1e-9
    # the typical step is a step of the run's own size: between its shortest and longest step
    assert min(r["step"] for r in rows) - 1e-9 <= t["step"] <= max(sum(r[p] for p in PHASES) for r in rows) + 1e-9


@pytest.mark.parametrize("seed", SEEDS)
def test_rounded_parts_still_add_up(seed):
    rng = random.Random(seed)
    parts = {p: rng.choice([0.0, rng.uniform(0, 0.2), rng.uniform(0, 50)]) for p in PHASES}
    total, shown = rounded_parts(parts)
    assert round(sum(shown.values()), 6) == round(total, 6)
    assert abs(total - sum(parts.values())) <= 0.05 + 1e-9
    assert all(abs(shown[p] - parts[p]) < 0.1 + 1e-9 and shown[p] >= 0 for p in PHASES)


@pytest.mark.parametrize("seed", SEEDS[:20])
def test_the_printed_breakdown_and_the_json_figures_agree(seed):
    rng = random.Random(seed)
    record = record_of({r: timeline(rng, rng.randint(6, 40)) for r in range(rng.randint(1, 4))})
    (summary,) = [f for f in profile_detect(record, Config()) if f.id == "profile.summary"]
    figures = compute(record)["step_ms"]
    lines = list(
        re.finditer(r"(rank \d+|ranks [^:]+): step (\d+\.\d) ms = ((?:[a-z+]+ \d+\.\d(?: \+ )?)+)", summary.message)
    )
    assert lines, summary.message  # one line per group of ranks with the same breakdown
    for m in lines:
        step = float(m.group(2))
        parts = [float(x) for x in re.findall(r"[a-z+]+ (\d+\.\d)", m.group(3))]
        assert round(sum(parts), 1) == step, m.group(0)
    assert summary.hint == ""  # a note: nothing to fix
    for r, t in typical(record).items():
        fig = figures[str(r)]
        assert abs(fig["step"] - t["step"]) < 1e-3
        assert abs(sum(fig[p] for p in PHASES) - fig["step"]) < 1e-3 * len(PHASES)
        assert summary.evidence["typical_ms"][str(r)]["step"] == t["step"]


def test_a_growth_rate_is_the_same_in_the_finding_the_json_and_compare(tmp_path):
    shutil.copytree(ROOT / "tests" / "golden" / "leak_graph", tmp_path / "run")
    record = load_run(str(tmp_path / "run"))
    report = diagnose(record, Config(), "memleak")
    (f,) = [f for f in report.findings if f.id == "memleak.autograd-graph"]
    per_rank = [report.figures["memory"][str(r)]["rss_bytes_per_step"] for r in f.culprits]
    rate = f.evidence["rss_bytes_per_step"]
    # the finding's rate is the median over its ranks of the very figure the JSON carries (rounded to 0.1 there)
    assert statistics.median(per_rank) == pytest.approx(rate, abs=0.06)
    if rate > 0:
        assert f"RSS +{size(rate)}/step" in f.message  # the unit `compare` writes it in


@pytest.mark.parametrize("seed", SEEDS[:30])
def test_a_chart_of_magnitudes_starts_at_zero(seed):
    rng = random.Random(seed)
    base = rng.choice([0, 5, 300 * 2**20])
    series = {
        f"rank {r}": [(s, base + rng.uniform(0, 2**20) * s) for s in range(1, rng.randint(2, 50))] for r in range(2)
    }
    svg = line_chart("t", series, rng.choice(["MiB", "nodes"]))
    labels = [float(x) for x in re.findall(r'text-anchor="end">(-?[\d.]+)</text>', svg)]
    assert labels and min(labels) == 0.0, labels


def test_the_time_to_full_is_a_rough_count_or_nothing():
    census = [{"host_available": 40 * 2**30}]
    assert _project([], census, 8 * 2**10, "host") == ""  # 5 million steps: beyond any run, not said
    line = _project([], census, 4 * 2**20, "host")
    assert line == "; at this rate the host is full in about 10,000 more steps", line
    assert (_about(12_345), _about(987), _about(42.4)) == ("12,000", "990", "42")
    assert FULL_HORIZON == 1_000_000
