"""A cross-group deadlock judged from a real run's ledger (tests/golden/cross_group: tests/frjobs/attachjob.py
under ``ddpdoctor hang``). Rank 1 all-reduces once more, on a second group, under ``if rank == 1``; rank 0 waits
in its next all_reduce on the default group. Each group's own sequence shows only a rank that is behind, so the
judgement must look across groups: rank 1's pending line is its own alone, rank 0's is one rank 1 used too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from helpers import marker_line

from ddpdoctor.analysis import diagnose
from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.hang.divergence import AWAY, cross_group_divergence
from ddpdoctor.analysis.state import all_states
from ddpdoctor.record.reader import load_run

GOLDEN = Path(__file__).resolve().parents[3] / "golden" / "cross_group"
SCRIPT = "tests/frjobs/attachjob.py"


def _line(marker: str) -> int:
    return marker_line(GOLDEN.parents[1] / "frjobs" / "attachjob.py", marker)


def test_the_rank_that_called_on_the_side_group_is_the_culprit_at_its_line():
    rep = diagnose(load_run(str(GOLDEN)), Config(timeout=60.0))
    assert (rep.verdict, rep.exit_code) == ("hang", 3)
    f = rep.findings[0]
    assert f.id == "hang.rank-conditional-collective" and f.culprits == (1,), f.message
    roles = {(loc.rank, loc.line, loc.role) for loc in f.locations if loc.file.endswith(SCRIPT)}
    assert (1, _line("EXTRA"), "diverged") in roles
    assert (0, _line("REGULAR"), "waiting") in roles
    assert "collective #1 of group 1" in f.message and "waits in another group's collective" in f.message


def test_the_divergence_is_on_the_side_group_with_the_other_rank_away():
    record = load_run(str(GOLDEN))
    verdict = record.monitor_event("verdict")
    states = all_states(record, float(verdict["t"]), Config(timeout=60.0))
    div = cross_group_divergence(record, states)
    assert div is not None and (div.group, div.seq, div.diverged) == ("1", 1, (1,))
    assert div.slots[0].op == AWAY and div.slots[1].op == "all_reduce"


def test_ranks_waiting_in_two_groups_each_at_a_line_of_its_own_name_nobody(tmp_path):
    """A symmetric if/else (each rank at a line the other never used) is no proof of an extra call: the
    cross-group rule names nobody, and the hang stays a timeout without culprits."""
    run = tmp_path / "run"
    shutil.copytree(GOLDEN, run)
    hb = run / "ranks" / "0" / "heartbeat.jsonl"
    lines = []
    for raw in hb.read_text().splitlines():
        rec = json.loads(raw)
        if rec.get("pending") and rec["pending"].get("site"):
            rec["pending"]["site"][1] = 99  # rank 0 now waits at a line of its own, never used by rank 1
        lines.append(json.dumps(rec))
    hb.write_text("\n".join(lines) + "\n")
    record = load_run(str(run))
    verdict = record.monitor_event("verdict")
    states = all_states(record, float(verdict["t"]), Config(timeout=60.0))
    assert cross_group_divergence(record, states) is None
