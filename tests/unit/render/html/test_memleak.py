"""The memory section of the HTML report (render/html/memleak.py): absent without memory records; RSS
and CUDA charts with the culprit rank labelled; past eight ranks the others folded into median and max;
the census table; growing tensor groups with their holder; the holders' source lines."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.analysis.findings import Finding, Report
from ddpdoctor.record.reader import RankRecord, RunRecord
from ddpdoctor.render.html.memleak import section
from ddpdoctor.render.html.parts import Sources


def _mem(rank: int, grow: int = 0, cuda: bool = False) -> list[dict]:
    out = [{"kind": "mem", "step": s, "rss": 2**28 + grow * s} for s in range(1, 11)]
    if cuda:
        for m in out:
            m["cuda_allocated"] = 2**30
    return out


def _census(step: int, count: int, nodes: int = 0) -> dict:
    group = {"shape": [4, 4], "dtype": "float32", "device": "cpu", "grad_fn": True, "count": count, "bytes": 64 * count}
    holders = {"[4,4]|float32|cpu|True": {"name": "self.history", "file": "/w/train.py", "line": 51}}
    return {"kind": "census", "step": step, "graph_nodes": nodes, "tensors": count, "objects": 900, "why": "schedule",
            "groups": [group], "group_holders": holders}  # fmt: skip


def _html(memory: dict[int, list[dict]], findings=()) -> str:
    rec = RunRecord("/run", {}, {r: RankRecord(r, memory=m) for r, m in memory.items()}, [])
    return section(Report("memleak", "findings", 1, "/run", tuple(findings)), rec, Sources())


LEAK = Finding("memleak.autograd-graph", "error", "grows", culprits=(1,))


def test_no_memory_records_no_section() -> None:
    assert _html({0: [], 1: []}) == ""


def test_the_rss_chart_labels_the_culprit_and_cuda_appears_only_with_cuda_figures() -> None:
    html = _html({0: _mem(0), 1: _mem(1, grow=2**20)}, [LEAK])
    assert "Process RSS per rank (MiB) by step" in html and "rank 1 (culprit) RSS" in html and "rank 0 RSS" in html
    assert "CUDA allocated" not in html
    assert "CUDA allocated per rank" in _html({0: _mem(0, cuda=True)})


def test_past_eight_ranks_the_others_are_median_and_max() -> None:
    html = _html(
        {r: _mem(r, grow=2**20 if r == 5 else 0) for r in range(12)},
        [Finding("memleak.rss", "error", "m", culprits=(5,))],
    )
    assert "rank 5 (culprit) RSS" in html
    assert "11 ranks [0-4,6-11]: median" in html and "11 ranks [0-4,6-11]: max" in html
    assert "rank 3 RSS" not in html


def test_censuses_give_a_table_and_the_growing_group_with_its_holder() -> None:
    cs = [_census(1, 10, 100), _census(8, 40, 400), _census(16, 80, 800)]
    html = _html({0: _mem(0) + cs, 1: _mem(1) + [_census(s, 10) for s in (1, 8, 16)]}, [LEAK])
    assert "Autograd graph nodes reachable from live tensors, by census step" in html
    assert "800 graph nodes · 80 tensors · 900 objects" in html
    assert "<code>[4, 4] float32 cpu grad_fn</code>" in html
    assert "10 &#8594; 80 (steps 1 &#8594; 16)" in html and "<td>5.0 KiB</td>" in html
    assert '<code>self.history</code> at <code title="/w/train.py">train.py:51</code>' in html


def test_flat_censuses_say_no_group_grew() -> None:
    html = _html({0: _mem(0) + [_census(s, 10) for s in (1, 8, 16)]})
    assert "No tensor group grew between the censuses." in html


def test_holders_show_the_storing_line(tmp_path: Path) -> None:
    p = tmp_path / "train.py"
    p.write_text("\n" * 50 + "        self.history.append(loss)\n")
    f = Finding("memleak.autograd-graph", "error", "m", evidence={"holders": {"1": {"name": "self.history", "file": str(p), "line": 51, "func": "fit"}}}, culprits=(1,))  # fmt: skip
    html = _html({0: _mem(0), 1: _mem(1)}, [f])
    assert "<h3>Holders</h3>" in html and 'rank 1 <span class="culprit">culprit</span>' in html
    assert "train.py:51</code> in fit" in html and "<code>self.history.append(loss)</code>" in html
