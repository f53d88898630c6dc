"""The memory picture (render/svg.py): a line chart scaled to its unit with one labelled polyline per
series, a "no data" chart for an empty one, and memory_svg stacking RSS, CUDA (only when present) and graph
nodes per rank."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from ddpdoctor.record.reader import RankRecord, RunRecord
from ddpdoctor.render.svg import COLORS, line_chart, memory_svg

NS = "{http://www.w3.org/2000/svg}"


def test_an_empty_chart_says_no_data() -> None:
    svg = line_chart("Process RSS <per rank>", {"rank 0": []}, "MiB")
    assert ET.fromstring(svg).get("height") == "60"
    assert "Process RSS &lt;per rank&gt;: no data" in svg


def test_a_chart_has_one_coloured_polyline_per_series_and_its_unit_on_the_axis() -> None:
    series = {"rank 0": [(1, 100 * 2**20), (10, 200 * 2**20)], "rank 1": [(1, 100 * 2**20), (10, 100 * 2**20)]}
    root = ET.fromstring(line_chart("RSS", series, "MiB"))
    lines = root.findall(f"{NS}polyline")
    assert [l.get("stroke") for l in lines] == COLORS[:2]
    texts = [t.text for t in root.iter(f"{NS}text")]
    assert "rank 0" in texts and "rank 1" in texts and "MiB" in texts and "step" in texts
    # the y labels are in MiB, from a meaningful zero to the top of the range with 5 % padding
    assert "0.0" in texts and "205.0" in texts
    # rank 0 rises: its last point is higher on the page (smaller y) than its first
    (x0, y0), (x1, y1) = (tuple(map(float, p.split(","))) for p in lines[0].get("points").split())
    assert x1 > x0 and y1 < y0


def test_memory_svg_stacks_rss_cuda_and_graph_nodes() -> None:
    mem = [{"kind": "mem", "step": s, "rss": 2**20 * s} for s in range(1, 5)]
    census = [{"kind": "census", "step": s, "graph_nodes": 10 * s} for s in (1, 2, 4)]
    cpu = RunRecord("/run", {}, {0: RankRecord(0, memory=mem + census)}, [])
    svg = memory_svg(cpu)
    root = ET.fromstring(svg)
    assert root.get("height") == "600" and len(root.findall(f"{NS}g")) == 2
    assert "CUDA allocated per rank" not in svg and "Autograd graph nodes" in svg
    gpu = [dict(e, cuda_allocated=2**30) for e in mem]
    svg = memory_svg(RunRecord("/run", {}, {0: RankRecord(0, memory=gpu)}, []))
    assert "CUDA allocated per rank" in svg and "rank 0 CUDA alloc" in svg
    assert ET.fromstring(svg).get("height") == "660"  # RSS, CUDA, and a "no data" chart of graph nodes
