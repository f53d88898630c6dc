"""render.html.hang: the hang section of the HTML report. On the recorded rank_conditional run (tests/golden:
rank 0 makes an extra all_reduce at #13, rank 1 then waits in the barrier at #16): the sequences side by side
around the first divergence, the culprit marked, the main thread's stacks folded; on hand-built runs: ranks
alike share a column, a healthy run has no section, a rank without stacks shows its faulthandler dump."""

from __future__ import annotations

import json
import re
import shutil

from builder import RunBuilder, pending
from helpers import ROOT

from ddpdoctor.analysis import diagnose
from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, Report
from ddpdoctor.record.reader import load_run
from ddpdoctor.render.html.hang import MAX_COLUMNS, section
from ddpdoctor.render.html.parts import Sources

GOLDEN = ROOT / "tests" / "golden"


def golden(tmp_path, name):
    shutil.copytree(GOLDEN / name, tmp_path / name)
    record = load_run(str(tmp_path / name))
    return record, diagnose(record, Config(), str(record.manifest.get("command")))


def rows(html: str) -> dict[str, list[str]]:
    """The sequence table: position -> its cells' text, tags stripped."""
    table = re.search(r'<table class="grid seq">(.*?)</table>', html, re.S)
    assert table, "no sequence table"
    out = {}
    for tr in re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S):
        cells = [re.sub(r"<[^>]+>", " ", c) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", tr, re.S)]
        cells = [" ".join(c.split()) for c in cells]
        out[cells[0].split()[0]] = cells[1:]
    return out


def test_the_sequences_around_the_divergence_with_the_culprit_marked(tmp_path):
    record, report = golden(tmp_path, "rank_conditional")
    html = section(report, record, Sources())
    assert html.startswith('<section id="hang"><h2>Collectives and stacks</h2>') and html.endswith("</section>")
    assert "Collective sequences of group 0 around position #13" in html
    t = rows(html)
    assert t["#"] == ["rank 0 (culprit)", "rank 1"]
    assert list(t)[1:] == [str(s) for s in range(9, 17)]  # 4 before #13, 3 after
    assert t["13"][0].startswith("all_reduce (1) rank_conditional.py:31")  # the extra call
    assert t["13"][1].startswith("all_reduce (1) rank_conditional.py:29")
    assert t["16"] == [
        "all_reduce (1) (waiting) rank_conditional.py:29 dist.all_reduce(correct) # REGULAR",
        "barrier (waiting) rank_conditional.py:32 dist.barrier() # END",
    ]
    assert t["9"] == ["DDP internal", "DDP internal"]
    assert '<th class="div">13 &#9664; first divergence</th>' in html


def test_each_ranks_main_stack_is_folded_with_the_culprit_first(tmp_path):
    record, report = golden(tmp_path, "rank_conditional")
    html = section(report, record, Sources())
    stacks = html[html.index("<h3>Stacks (main thread)</h3>") :]
    folds = re.findall(r"<summary>(.*?)</summary>", stacks)
    assert len(folds) == 2 and '<b>rank 0</b> <span class="culprit">culprit</span>' in folds[0]
    assert folds[1].startswith("<b>rank 1</b>:") and "culprit" not in folds[1]
    assert "stack dump at the verdict" in folds[0] and "(11 frames)" in folds[0]
    assert (
        '<div class="lib">.venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:5356 in barrier'
        in stacks
    )
    assert '<div class="user">probes/rank_conditional.py:32 in main</div>' in stacks


def test_a_healthy_run_has_no_hang_section(tmp_path):
    record, report = golden(tmp_path, "healthy")
    assert section(report, record, Sources()) == ""


def _hang(tmp_path, n: int, odd: set[int]) -> tuple:
    b = RunBuilder(tmp_path / "run")
    for r in range(n):
        b.start(r)
        for s in (1, 2, 3):
            b.coll(r, s, 10)
        p = pending("all_reduce", 4, 20, 5.0) if r in odd else pending("barrier", 4, 30, 5.0, ())
        b.hb(r, 6.0, 4, p)
    f = Finding(
        "hang.rank-conditional-collective", "error", "first divergence at collective #4", "", tuple(range(n)), (),
        {"divergence": {"group": "0", "seq": 4, "diverged": sorted(odd)}}, tuple(sorted(odd)),
    )  # fmt: skip
    return load_run(str(b.root)), Report("hang", "hang", 3, str(b.root), (f,))


def test_ranks_with_the_same_sequence_share_one_column(tmp_path):
    record, report = _hang(tmp_path, 6, {4})
    t = rows(section(report, record, Sources()))
    assert t["#"] == ["rank 4 (culprit)", "5 ranks [0-3,5]"]
    assert t["4"] == ["all_reduce (4) (waiting) train.py:20", "barrier (waiting) train.py:30"]


def test_more_groups_than_columns_are_named_below_the_table(tmp_path):
    b = RunBuilder(tmp_path / "run")
    n = MAX_COLUMNS + 2
    for r in range(n):  # every rank waits at its own line: a group each
        b.start(r).coll(r, 1, 10).hb(r, 6.0, 2, pending("barrier", 2, 100 + r, 5.0, ()))
    f = Finding(
        "hang.rank-conditional-collective", "error", "x", "", tuple(range(n)), (),
        {"divergence": {"group": "0", "seq": 2, "diverged": [0]}}, (0,),
    )  # fmt: skip
    html = section(Report("hang", "hang", 3, str(b.root), (f,)), load_run(str(b.root)), Sources())
    assert len(rows(html)["#"]) == MAX_COLUMNS
    assert "2 more group(s) of ranks with other sequences: rank 8; rank 9" in html


def test_a_rank_without_a_stack_dump_shows_its_traceback_or_faulthandler_dump(tmp_path):
    record, report = _hang(tmp_path, 2, {0})
    err = {"type": "ValueError", "message": "x", "frames": [["/work/train.py", 21, "main"]]}
    (tmp_path / "run" / "ranks" / "0" / "error.json").write_text(json.dumps(err))
    (tmp_path / "run" / "ranks" / "1" / "terminated.txt").write_text(
        'Thread 0x1 (most recent call first):\n  File "/work/train.py", line 30 in main\n'
    )
    record = load_run(str(tmp_path / "run"))
    html = section(report, record, Sources())
    assert '<b>rank 0</b> <span class="culprit">culprit</span>: exception traceback at train.py:21 (1 frames)' in html
    assert "<b>rank 1</b>: faulthandler dump</summary><pre>Thread 0x1 (most recent call first):" in html
