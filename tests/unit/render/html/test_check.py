"""The check section of the HTML report (render/html/check.py): absent without check records; sampler
passes per epoch with a repeated order marked; shard overlap and gaps per DataLoader pass; drifted
fingerprints by rank group, or the statement that they are identical."""

from __future__ import annotations

from ddpdoctor.analysis.findings import Finding, Report
from ddpdoctor.record.reader import RankRecord, RunRecord
from ddpdoctor.render.html.check import section
from ddpdoctor.render.html.parts import Sources


def _html(checks: dict[int, list[dict]], fps: dict[int, list[dict]] | None = None, findings=()) -> str:
    ranks = {r: RankRecord(r, checks=c, fingerprints=(fps or {}).get(r, [])) for r, c in checks.items()}
    return section(Report("check", "findings", 1, "/run", tuple(findings)), RunRecord("/run", {}, ranks, []), Sources())


def _sampler(k: int, digest: str) -> dict:
    return {"kind": "sampler", "ordinal": 0, "k": k, "epoch": 0, "seed": 0, "n": 50, "digest": digest,
            "site": ["/w/train.py", 30, "main"]}  # fmt: skip


def test_no_check_records_no_section() -> None:
    assert _html({0: [], 1: []}) == ""


def test_a_pass_that_repeats_the_first_order_is_marked() -> None:
    html = _html(
        {r: [_sampler(0, "d1"), _sampler(1, "d1")] for r in (0, 1)},
        findings=[Finding("x", "error", "m", culprits=(0, 1))],
    )
    assert '<section id="check">' in html and "sampler 0 iterated at train.py:30" in html
    assert "<td>2 ranks [0,1]</td><td>0</td><td>0</td><td>50</td><td>first pass</td>" in html
    assert '<b class="culprit">same order as its first pass</b>' in html
    html = _html({r: [_sampler(0, "d1"), _sampler(1, "d2")] for r in (0, 1)})
    assert "<td>new order</td>" in html and "same order" not in html


def test_shard_overlap_per_loader_pass() -> None:
    loader = {"kind": "loader", "ordinal": 0, "dataset_len": 8}

    def lp(idx: list[int]) -> dict:
        return {"kind": "loader_pass", "ordinal": 0, "k": 0, "indices": idx}

    ok = _html({0: [loader, lp([0, 2, 4, 6])], 1: [loader, lp([1, 3, 5, 7])]})
    assert "<td>8</td><td>8</td><td>0</td><td>0</td><td>8</td><td>disjoint, complete</td>" in ok
    bad = _html({0: [loader, lp([0, 1, 2, 3])], 1: [loader, lp([2, 3, 4, 5])]})
    assert '<td><b class="culprit">2</b></td><td><b class="culprit">2</b></td>' in bad
    assert "overlap or gaps" in bad


def test_drifted_fingerprints_are_grouped_and_equal_ones_said_identical() -> None:
    def fp(rank: int, w: float) -> dict:
        return {"kind": "fp", "model": 0, "step": 3, "where": "forward", "params": {"w": [w, 1.0], "b": [0.0, 0.0]}}

    same = _html({0: [], 1: [], 2: []}, {r: [fp(r, 1.0)] for r in (0, 1, 2)})
    assert "Identical on every rank at all 1 fingerprint points." in same
    drift = _html({0: [], 1: [], 2: []}, {0: [fp(0, 1.0)], 1: [fp(1, 1.0)], 2: [fp(2, 9.0)]})
    assert "<b>model 0, params, DDP forward 3</b> (forward): 1 of 2 differ across ranks" in drift
    assert "rank 2: <code>[9.0, 1.0]</code><br>2 ranks [0,1]: <code>[1.0, 1.0]</code>" in drift
