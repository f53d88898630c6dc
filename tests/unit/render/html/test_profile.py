"""The profile section of the HTML report (render/html/profile.py): absent without medians or a
timeline; stacked bars per rank with the straggler marked; a lane per rank of a few steady steps; the
trace linked."""

from __future__ import annotations

import timelines

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Report
from ddpdoctor.analysis.profile.breakdown import detect
from ddpdoctor.record.reader import RankRecord, RunRecord
from ddpdoctor.render.html.parts import Sources
from ddpdoctor.render.html.profile import section


def _record(tls: dict[int, list[dict]]) -> RunRecord:
    return RunRecord("/nonexistent-run", {}, {r: RankRecord(r, timeline=tl) for r, tl in tls.items()}, [])


def test_no_timeline_and_no_summary_no_section() -> None:
    assert section(Report("profile", "ok", 0, "/r"), _record({0: []}), Sources()) == ""


def test_bars_mark_the_straggler_and_the_trace_is_linked() -> None:
    rec = _record(
        {0: timelines.steps(10, backward=50), 1: timelines.steps(10, backward=50), 2: timelines.steps(10, forward=40)}
    )
    findings = tuple(detect(rec, Config()))
    assert [f.id for f in findings] == ["profile.straggler", "profile.summary"]
    html = section(Report("profile", "findings", 0, "/r", findings), rec, Sources())
    assert html.startswith('<section id="profile"><h2>Where the step time goes</h2>')
    assert "rank 2 (straggler)" in html and "rank 0 (straggler)" not in html
    assert '<a href="trace.json">trace.json</a>' in html and html.endswith("</section>")


def test_a_timeline_alone_still_draws_the_lanes() -> None:
    html = section(
        Report("profile", "ok", 0, "/r"), _record({0: timelines.steps(10), 1: timelines.steps(10)}), Sources()
    )
    assert 'class="timeline"' in html and "Median milliseconds" not in html
    assert '<g class="lane" data-rank="0"' in html and '<g class="lane" data-rank="1"' in html
    assert "<title>rank 0: forward 10.0 ms</title>" in html


def _sharded(fsdp: dict | None, buckets: list[int] | None = None) -> str:
    tl = (
        timelines.with_fsdp_comm(timelines.steps(10), all_gather=2.0, reduce_scatter=3.0)
        if fsdp
        else timelines.steps(10)
    )
    tl.append(timelines.info(steps=10, forwards=10, buckets=buckets or [], fsdp=fsdp))
    rec = _record({0: tl, 1: tl})
    return section(Report("profile", "ok", 0, "/r", tuple(detect(rec, Config()))), rec, Sources())


def test_an_fsdp1_job_shows_its_sharding_with_the_collectives_time() -> None:
    fsdp = {
        "kind": "FSDP1",
        "strategies": {"SHARD_GRAD_OP": 4},
        "modules": 4,
        "flat_params": 4,
        "params": 8,
        "sharded_bytes": 6 * 1024,
        "world": 2,
        "mp": {"param_dtype": "bfloat16"},
        "use_orig_params": True,
        "cpu_offload": False,
    }
    html = _sharded(fsdp)
    assert '<h3>Sharding (FSDP1)</h3><table class="kv sharding" data-kind="FSDP1">' in html
    for row in (
        "<tr><th>sharding strategy</th><td>SHARD_GRAD_OP (4 flat parameter(s))</td></tr>",
        "<tr><th>flat parameters</th><td>4</td></tr>",
        "<tr><th>sharded on rank 0</th><td>6.0 KiB</td></tr>",
        "<tr><th>shard group</th><td>2 rank(s)</td></tr>",
        "<tr><th>mixed precision</th><td>param bfloat16</td></tr>",
        "<tr><th>use_orig_params</th><td>on</td></tr>",
        "<tr><th>CPU offload</th><td>off</td></tr>",
        "<tr><th>in FSDP1&#x27;s collectives per step (rank 0, inside forward and backward)</th>"
        "<td>all-gather 2.0 ms, reduce-scatter 3.0 ms</td></tr>",
    ):
        assert row in html, row
    assert "Gradient buckets (DDP)" not in html


def test_an_fsdp2_job_shows_its_mesh_and_reshard_after_forward() -> None:
    fsdp = {
        "kind": "FSDP2",
        "modules": 4,
        "reshard_after_forward": 3,
        "mesh": {"shape": [2], "dims": ["dp"]},
        "mp": {},
        "params": 8,
        "sharded_bytes": 3 * 2**20,
    }
    html = _sharded(fsdp)
    assert '<h3>Sharding (FSDP2)</h3><table class="kv sharding" data-kind="FSDP2">' in html
    for row in (
        "<tr><th>mesh</th><td>2 (dp)</td></tr>",
        "<tr><th>reshard_after_forward</th><td>on 3 of 4 modules</td></tr>",
        "<tr><th>sharded on rank 0</th><td>3.0 MiB</td></tr>",
        "<tr><th>mixed precision</th><td>off</td></tr>",
        "<td>all-gather 2.0 ms, reduce-scatter 3.0 ms</td>",
    ):
        assert row in html, row


def test_a_ddp_job_shows_its_buckets_and_no_sharding() -> None:
    html = _sharded(None, buckets=[25 * 2**20, 512 * 1024])
    assert "<h3>Gradient buckets (DDP)</h3>" in html and "<td>25.0 MiB, 512.0 KiB</td>" in html
    assert "Sharding" not in html
