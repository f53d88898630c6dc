"""postmortem/attached.py: the attach run directory's flight-recorder note and dump folder, and the one
report of the stacks' diagnosis with the dumps' (a finding both name with the same culprits kept once,
with the stacks' lines added; others kept as they are; a changed dump noted, never used)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ddpdoctor.analysis.findings import Finding, Location, Report
from ddpdoctor.postmortem import attached

GLOO = Path(__file__).resolve().parents[2] / "data" / "fr" / "gloo"


def _attach_dir(tmp_path: Path, dumps: str | None = "helper", note: str = "2 dumps taken") -> Path:
    d = tmp_path / "attach"
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"command": "attach", "attach": {"fr": {"note": note}}}))
    (d / "fr").mkdir()
    if dumps:
        for f in (GLOO / dumps).iterdir():
            shutil.copy(f, d / "fr" / f.name)
    return d


def _stacks(*findings: Finding) -> Report:
    return Report("attach", "hang" if findings else "ok", 3 if findings else 0, "/runs/a", findings, notes=("s",))


def _rank_conditional(culprits: tuple[int, ...]) -> Finding:
    locs = (Location(1, "/w/frjob.py", 122, "helper", "diverged"), Location(0, "/w/frjob.py", 117, "main", "waiting"))
    return Finding("hang.rank-conditional-collective", "error", "from stacks", "h", (0, 1), locs, {}, culprits=culprits)


def test_fr_note_reads_only_an_attach_manifest(tmp_path):
    d = _attach_dir(tmp_path)
    assert attached.fr_note(str(d)) == "2 dumps taken"
    (d / "manifest.json").write_text(json.dumps({"command": "hang"}))
    assert attached.fr_note(str(d)) is None
    assert attached.fr_note(str(tmp_path / "missing")) is None


def test_fr_dirs_lists_only_folders_that_hold_dumps(tmp_path):
    full = _attach_dir(tmp_path)
    empty = _attach_dir(tmp_path / "e", dumps=None)
    assert attached.fr_dirs([str(full), str(empty)]) == [str(full / "fr")]


def test_the_dumps_finding_the_stacks_agree_on_is_kept_once_with_the_stacks_lines(tmp_path):
    d = _attach_dir(tmp_path)
    out = attached.with_flight_recorder(_stacks(_rank_conditional((1,))), [str(d)], "error")
    ids = [f.id for f in out.findings]
    assert ids.count("hang.rank-conditional-collective") == 1, ids
    f = out.findings[0]
    assert f.culprits == (1,) and f.message.endswith("(from the flight recorder; the stacks agree)")
    assert "rank 1 made an extra all_reduce([8])" in f.message
    assert (out.verdict, out.exit_code, out.run_dir) == ("hang", 3, "/runs/a")
    assert "2 dumps taken" in out.notes and "s" in out.notes


def test_findings_with_other_culprits_are_both_kept(tmp_path):
    d = _attach_dir(tmp_path)
    out = attached.with_flight_recorder(_stacks(_rank_conditional((0,))), [str(d)], "error")
    got = [(f.id, f.culprits) for f in out.findings if f.id == "hang.rank-conditional-collective"]
    assert sorted(got) == [("hang.rank-conditional-collective", (0,)), ("hang.rank-conditional-collective", (1,))]
    assert not any("the stacks agree" in f.message for f in out.findings)


def test_a_dump_changed_after_attach_is_noted_and_not_used(tmp_path):
    d = _attach_dir(tmp_path)
    raw = (d / "fr" / "rank_0").read_bytes()
    (d / "fr" / "rank_0").write_bytes(raw[: len(raw) // 2])
    stacks = _stacks(_rank_conditional((1,)))
    out = attached.with_flight_recorder(stacks, [str(d)], "error")
    assert out.findings == stacks.findings
    assert any(n.startswith("the flight-recorder dumps were not used:") for n in out.notes), out.notes


def test_the_stacks_give_the_kind_and_the_side_of_the_dumps_divergence() -> None:
    """The dumps (JSON, no lines) see that two ranks' calls differ and cannot say which side broke off; the
    stacks see rank 1 left the loop: one finding, the stacks' early exit."""
    early = Finding("hang.early-exit", "error", "rank 1 left the loop", "h", (0, 1), (), {}, culprits=(1,))
    nobody = Finding("hang.divergent-collective", "error", "calls differ", "h", (0, 1), (), {}, culprits=())
    out = attached.combine(_stacks(early), Report("analyze", "hang", 3, "/runs/a/fr", (nobody,)))
    assert [f.id for f in out.findings] == ["hang.early-exit"]
    assert out.findings[0].message == (
        "rank 1 left the loop (the flight recorder shows the ranks' calls differ there, without the lines to say "
        "which rank left)"
    )
    div = Finding("hang.divergent-collective", "error", "calls differ", "h", (0, 1), (), {}, culprits=(1,))
    out = attached.combine(_stacks(early), Report("analyze", "hang", 3, "/runs/a/fr", (div,)))
    assert out.findings[0].message == "rank 1 left the loop (the flight recorder names the same ranks)"
    # the dumps name another rank: both kept, the dumps' first
    other = Finding("hang.divergent-collective", "error", "calls differ", "h", (0, 1), (), {}, culprits=(0,))
    out = attached.combine(_stacks(early), Report("analyze", "hang", 3, "/runs/a/fr", (other,)))
    assert [f.id for f in out.findings] == ["hang.divergent-collective", "hang.early-exit"]
    # a finding that names its culprits comes before one of the same severity that names none
    crash = Finding("crash.exception", "error", "rank 1 raised", "h", (0, 1), (), {}, culprits=(1,))
    out = attached.combine(_stacks(crash), Report("analyze", "hang", 3, "/runs/a/fr", (nobody,)))
    assert [f.id for f in out.findings] == ["crash.exception", "hang.divergent-collective"]
