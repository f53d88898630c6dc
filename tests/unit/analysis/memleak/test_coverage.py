"""`ddpdoctor memleak` with real torchrun ranks and default settings: each leak probe is found with its
culprit ranks, holder (as the code writes it) and storing line, in slow and fast loops; healthy loops of
several styles, the plateau and the healthy probe give no error. CUDA paths run where a GPU exists and skip
cleanly here."""

from __future__ import annotations


def _rss_run(root, census_steps):
    """Hand-built: RSS grows 1 MiB per step on both ranks for 200 steps; censuses (flat) at the given steps."""
    from builder import RunBuilder

    from ddpdoctor.analysis import diagnose
    from ddpdoctor.analysis.config import Config
    from ddpdoctor.record.reader import load_run

    b = RunBuilder(root, command="memleak")
    for r in (0, 1):
        b.start(r)
        for s in range(1, 201):
            b.add(r, "memory.jsonl", "mem", 1.0 + s / 100, step=s, rss=300 * 2**20 + s * 2**20)
            if s in census_steps:
                b.census(r, 1.0 + s / 100, s)
        b.finish(r, 5.0)
    return next(f for f in diagnose(load_run(str(root)), Config(), "memleak").findings if f.id == "memleak.rss")


def test_rss_growth_is_native_memory_only_when_censuses_covered_it(tmp_path):
    f = _rss_run(tmp_path / "few", {1})
    assert f.culprits == (0, 1) and "native" not in f.message and "census could not explain it" in f.message
    assert "--census-every" in f.hint and f.evidence["cause"] == "unknown"
    f = _rss_run(tmp_path / "covered", {1, 2, 4, 8, 16, 32, 64, 100, 128, 160, 199})
    assert "native memory" in f.message and f.evidence["cause"] == "native"
