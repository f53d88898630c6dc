"""The finding catalog is the one list of ids: the code emits nothing outside it, every id has its page, the
README's list is made from it, the probes expect ids it holds, and `ddpdoctor findings` prints it. Pure and
fast (no ranks)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from helpers import ROOT

from ddpdoctor.analysis.catalog import CATALOG, FAMILIES, GROUPS, entry, readme_table, selected
from ddpdoctor.analysis.findings import Finding
from ddpdoctor.analysis.registry import verdict_of
from ddpdoctor.health.selftest import probes

PREFIXES = (
    "hang",
    "crash",
    "run",
    "teardown",
    "memleak",
    "data",
    "drift",
    "seed",
    "checkpoint",
    "perf",
    "profile",
    "multinode",
    "probe",
    "attach",
    "collective",
    "doctor",
    "postmortem",
)
ID_LITERAL = re.compile(r'"((?:' + "|".join(PREFIXES) + r')\.[a-z0-9]+(?:-[a-z0-9]+)*)"')
NOT_IDS = {"run.py"}  # a file name that reads like one


def code_ids() -> set[str]:
    ids: set[str] = set()
    for path in (ROOT / "ddpdoctor").rglob("*.py"):
        ids |= set(ID_LITERAL.findall(path.read_text()))
    return ids - NOT_IDS


def test_every_id_the_code_names_is_in_the_catalog():
    ids = code_ids()
    assert len(ids) >= 50
    assert sorted(ids - set(CATALOG)) == []


def test_every_catalog_id_has_a_page_and_every_page_an_id():
    pages = {p.stem for p in (ROOT / "docs" / "findings").glob("*.md")}
    assert sorted(set(CATALOG) - pages) == [], "ids without a page"
    assert sorted(pages - set(CATALOG)) == [], "pages of ids the catalog does not hold"
    for e in CATALOG.values():
        assert e.group in GROUPS and e.title and set(e.severities) <= {"error", "warning", "note"}
        assert e.family == e.id.split(".", 1)[0] and e.family in FAMILIES  # a family is the id's prefix
        assert (ROOT / e.page).read_text().startswith(f"# {e.id}\n")


def test_the_readme_list_is_the_catalog():
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- findings:begin[^>]*-->\n(.*?)\n<!-- findings:end -->", text, re.S)
    assert block, "README has no findings block"
    assert block.group(1) == readme_table(), "README's findings list differs: paste readme_table() between the markers"


def test_every_probe_expects_an_id_of_the_catalog():
    ps = probes()
    assert len(ps) >= 25
    expected = [p.expected for p in ps if p.expected]
    assert [i for i in expected if i not in CATALOG] == []
    # digits in an id were once cut off by the docstring pattern (recv_deadlock.py expected "hang.p")
    assert "hang.p2p-deadlock" in expected


def test_verdict_and_exit_code_come_from_the_catalog():
    def f(fid: str, sev: str = "error") -> Finding:
        return Finding(fid, sev, "m")  # type: ignore[arg-type]

    assert verdict_of([]) == ("ok", 0)
    assert verdict_of([f("profile.straggler", "warning")]) == ("ok", 0)
    assert verdict_of([f("profile.straggler", "warning")], "warning") == ("ok", 1)
    assert verdict_of([f("seed.identical-streams", "note")], "warning") == ("ok", 0)
    assert verdict_of([f("memleak.rss")]) == ("findings", 1)
    assert verdict_of([f("crash.exception"), f("memleak.rss")]) == ("crash", 1)
    assert verdict_of([f("crash.exception"), f("hang.early-exit")]) == ("hang", 3)
    assert verdict_of([f("run.failed-before-init"), f("hang.timeout")]) == ("error", 4)
    assert verdict_of([f("run.failed-before-init"), f("run.no-distributed")]) == ("error", 2)
    assert entry("nosuch.id").family == "nosuch"


def test_findings_command_lists_the_catalog():
    out = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "findings", "--json"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema"] == "ddpdoctor.findings" and [x["id"] for x in doc["findings"]] == list(CATALOG)
    hang = next(x for x in doc["findings"] if x["id"] == "hang.rank-conditional-collective")
    assert (hang["family"], hang["severity"], hang["verdict"], hang["exit_code"]) == ("hang", "error", "hang", 3)
    text = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "findings", "--family", "memleak"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "memleak.autograd-graph" in text and "hang.timeout" not in text


@pytest.mark.parametrize(
    "fid, select, ignore, kept",
    [
        ("seed.identical-streams", (), (), True),
        ("seed.identical-streams", (), ("seed.identical-streams",), False),
        ("seed.identical-streams", (), ("seed",), False),
        ("crash.exception", ("hang",), (), False),  # crash is a family of its own, not hang's
        ("crash.abnormal-exit", ("crash",), ("crash.abnormal-exit",), False),  # the more specific wins
        ("hang.timeout", ("hang.timeout",), ("hang",), True),
        ("hang.timeout", ("hang",), ("hang",), False),  # as specific: the ignore wins
    ],
)
def test_select_and_ignore_follow_ruffs_rule(fid, select, ignore, kept):
    assert selected(fid, select, ignore) is kept
