"""A rank stalled inside its step, in its data-reading helper (probes/busy_in_reader.py), under
`ddpdoctor hang` on real gloo ranks: it never left its loop and never ran out of batches, so the verdict is
hang.timeout naming it at its line, never hang.uneven-batches."""

from __future__ import annotations

from helpers import PROBES, ddpdoctor, finding, lines_of, marker_line


def test_a_rank_busy_in_its_reader_is_a_timeout_not_uneven_batches(tmp_path):
    probe = PROBES / "busy_in_reader.py"
    r = ddpdoctor(["hang", "--timeout", "3", str(probe)], tmp_path, timeout=180)
    assert r.code == 3, r.err[-2000:]
    ids = [f["id"] for f in r.report["findings"]]
    assert "hang.uneven-batches" not in ids, ids
    f = finding(r.report, "hang.timeout")
    assert f["culprits"] == [1]
    assert lines_of(f, 1) == {marker_line(probe, "READ")}
    assert lines_of(f, 0) == {marker_line(probe, "STEP")}
