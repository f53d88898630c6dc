"""Every process group judged from the ranks' program orders (analysis/hang/programs.py), on real runs'
ledgers: a 2-D device mesh of four ranks (tests/frjobs/meshjob.py under ``ddpdoctor hang``, recorded as
tests/golden/mesh_tp_extra and tests/golden/mesh_dp_skip). Each group's own sequence only shows a rank behind
and the waits are a cycle across groups; the order of each rank's calls across its groups names the rank that
made one call more (rank 3, on tp) or one fewer (rank 1, on dp), its line, and the others as its victims.
The rule itself on hand-made orders: an insertion, a deletion, and the cases that name nobody."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from helpers import marker_line

from ddpdoctor.analysis import diagnose
from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.hang.programs import OwnReading, Step, group_label, own_departure, program_parting
from ddpdoctor.record.reader import load_run
from ddpdoctor.render.lanes import lanes_svg

GOLDEN = Path(__file__).resolve().parents[3] / "golden"
JOB = GOLDEN.parent / "frjobs" / "meshjob.py"


@pytest.mark.parametrize(
    ("name", "culprit", "marker", "words"),
    [("mesh_tp_extra", 3, "EXTRA", "made one all_reduce more"), ("mesh_dp_skip", 1, "GRADS", "skipped its all_reduce")],
)
def test_the_rank_that_made_or_skipped_a_call_on_one_group_is_the_culprit_at_its_line(name, culprit, marker, words):
    rep = diagnose(load_run(str(GOLDEN / name)), Config(timeout=60.0))
    assert (rep.verdict, rep.exit_code) == ("hang", 3)
    (f,) = [f for f in rep.findings if f.severity == "error"]
    assert f.id == "hang.rank-conditional-collective", f.message
    assert f.culprits == (culprit,)
    assert words in f.message and "stranded" in f.message
    assert {l.line for l in f.locations if l.rank == culprit} == {marker_line(JOB, marker)}
    assert {l.rank for l in f.locations if l.role == "victim"} == {0, 1, 2, 3} - {culprit}


def _prog(*calls: str) -> list[Step]:
    """A rank's order of calls, each ``GROUP:LINE`` (the op all_reduce); positions counted per group."""
    n: dict[str, int] = {}
    out = []
    for c in calls:
        g, line = c.split(":")
        n[g] = n.get(g, 0) + 1
        out.append(Step("all_reduce", ("t.py", int(line), "f"), g, n[g]))
    return out


STEP = ("tp:1", "dp:2")


def test_one_call_more_is_an_extra_call_of_that_rank():
    base = list(STEP * 4) + ["w:9"]
    odd = list(STEP) + ["tp:1", "tp:5", "dp:2", "tp:1", "dp:2"]  # waits in its last
    part = program_parting({0: _prog(*base), 1: _prog(*base), 2: _prog(*base), 3: _prog(*odd)})
    assert part is not None and (part.odd, part.kind, part.index) == ((3,), "extra", 3)
    assert part.steps[3] is not None and part.steps[3].site == ("t.py", 5, "f")


def test_one_call_fewer_is_a_skipped_call_of_that_rank():
    base = list(STEP * 4) + ["w:9"]
    odd = list(STEP) + ["tp:1", "tp:1", "dp:2", "tp:1", "dp:2", "w:9"]
    progs = {0: _prog(*base), 1: _prog(*odd), 2: _prog(*base), 3: _prog(*base)}
    part = program_parting(progs)
    assert part is not None and (part.odd, part.kind) == ((1,), "skipped")
    assert part.expected.site == ("t.py", 2, "f") and part.skipped_at(progs, 1) == ("dp", 2)


def test_two_sides_or_an_order_that_proves_neither_way_name_nobody():
    base = list(STEP * 3)
    assert program_parting({0: _prog(*base), 1: _prog(*base[:3], "tp:7", *base[3:])}) is None  # two ranks
    # the odd rank's later calls contradict both an insertion and a deletion
    odd = list(STEP) + ["tp:1", "tp:7", "tp:7", "tp:7", "tp:7"]
    assert program_parting({0: _prog(*base), 1: _prog(*base), 2: _prog(*odd)}) is None
    assert program_parting({r: _prog(*base) for r in range(4)}) is None  # the same order everywhere


def test_a_group_is_named_by_its_mesh_dimension_where_a_device_mesh_made_it():
    assert group_label("4", [2, 3], "mesh_tp") == "group tp (4: ranks 2,3)"
    assert group_label("4", [2, 3], "undefined") == "group 4 (ranks 2,3)"
    assert group_label("0", [], "mesh_default") == "group 0"


def test_the_hang_picture_draws_each_groups_row_in_each_ranks_lane(tmp_path):
    shutil.copytree(GOLDEN / "mesh_tp_extra", tmp_path / "run")
    record = load_run(str(tmp_path / "run"))
    svg = lanes_svg(record, diagnose(record, Config(timeout=60.0)))
    lane3 = re.search(r'<g class="lane" data-rank="3"[^>]*>(.*?)</g>', svg, re.S)
    assert lane3 is not None
    rows = set(re.findall(r'class="group-row" data-group="(\w+)"', lane3.group(1)))
    assert rows == {"4", "2"}  # rank 3's tp and dp groups
    assert "group 4 [2,3]" in lane3.group(1)
    # the divergence is drawn on the tp row, the wait on the group rank 3 waits in
    assert "#4 all_reduce at meshjob.py:34 (diverged)" in lane3.group(1)
    assert "waits in all_reduce #7 of group 4" in lane3.group(1)


# a pipeline's stages (tests/frjobs/stagejob.py): each rank's own routine, p2p ops included, by (op, line)
FIRST = [("send", 29), ("all_reduce", 38), ("barrier", 40)]
MIDDLE = [("recv", 31), ("send", 33), ("all_reduce", 38), ("barrier", 40)]
LAST = [("recv", 35), ("all_reduce", 38), ("barrier", 40)]


def test_own_routine_a_stage_that_left_out_its_send():
    assert own_departure(MIDDLE * 3 + [("recv", 31), ("all_reduce", 38)]) == OwnReading("skipped", ("send", 33), 13)
    got = own_departure(MIDDLE * 3 + [("recv", 31), ("all_reduce", 38), ("barrier", 40)])
    assert got == OwnReading("skipped", ("send", 33), 13)


def test_own_routine_a_stage_that_made_one_collective_more():
    # stagejob.py extra: the middle stage all-reduces at line 37 before its step's all-reduce (line 38)
    calls = MIDDLE * 3 + [("recv", 31), ("send", 33), ("all_reduce", 37), ("all_reduce", 38)]
    assert own_departure(calls) == OwnReading("extra", ("all_reduce", 37), 14)


def test_own_routine_an_extra_call_without_lines_is_not_read_as_a_short_routine():
    """Without lines (a JSON dump) the extra all-reduce and the step's own are two equal calls in a row: a
    period of one seen twice, which is no routine (``judge.repeats``); the step's routine reads the extra."""
    bare = [(op, 0) for op, _ in MIDDLE]
    calls = bare * 3 + [("recv", 0), ("send", 0), ("all_reduce", 0), ("all_reduce", 0)]
    assert own_departure(calls) == OwnReading("extra", ("all_reduce", 0), 14)


@pytest.mark.parametrize("calls", [FIRST * 3 + FIRST[:2], LAST * 3 + LAST[:1], MIDDLE * 3, MIDDLE * 3 + MIDDLE[:3]])
def test_own_routine_a_rank_where_its_routine_has_it(calls):
    assert own_departure(calls) == OwnReading("ok")


@pytest.mark.parametrize(
    ("calls", "read"),
    [
        (MIDDLE + [("recv", 31), ("all_reduce", 38)], None),  # one whole step before: no routine to read against
        (MIDDLE * 3 + [("recv", 31)], OwnReading("ok")),  # its send not made yet: nothing proves it left out
        ([("all_reduce", i) for i in range(12)], None),  # no period at all
        # a call only where the step's next one should be: as much a call in its place as an extra one
        (MIDDLE * 3 + [("recv", 31), ("send", 33), ("all_reduce", 37)], None),
    ],
)
def test_own_routine_names_nothing_it_cannot_prove(calls, read):
    assert own_departure(calls) == read
