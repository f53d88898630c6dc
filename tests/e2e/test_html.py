"""The HTML report (report.html in every run directory, ``--html FILE``): real runs (hang, memleak, check
probes, 2 ranks on gloo) rendered, then opened in a real browser (Debian's ``chromium --headless
--dump-dom``) and checked in the DOM the browser built: the finding id, the culprit rank, the marked
source line; nothing that loads from the network; a ``<script>`` in the user's source shown as text, never
run. Where chromium is not installed the browser tests skip (with the reason) and the same checks run on
the file itself with Python's html.parser (test names ending in ``_parsed``)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers import PROBES, ddpdoctor, marker_line

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_browser = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (apt-get install chromium): "
    "the browser checks are skipped; the *_parsed tests check the same file",
)
INJECT = "# <script>document.title='pwned'</script> & <b>not bold</b>"


# --- a small DOM from html.parser -------------------------------------------------------------------------


class Node:
    def __init__(self, tag: str, attrs: dict[str, str], parent: Node | None) -> None:
        self.tag, self.attrs, self.parent, self.children, self.texts = tag, attrs, parent, [], []

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def walk(self):
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.walk()

    def find_all(self, tag: str | None = None, **attrs: str) -> list[Node]:
        return [
            n
            for n in self.walk()
            if (tag is None or n.tag == tag)
            and all(
                attrs[k] in (n.attrs.get(k.rstrip("_")) or "").split() if k == "class_" else n.attrs.get(k) == v
                for k, v in attrs.items()
            )
        ]


_VOID = {
    "meta",
    "br",
    "link",
    "img",
    "input",
    "hr",
    "col",
    "source",
    "wbr",
    "area",
    "base",
    "embed",
    "param",
    "track",
    "rect",
    "polyline",
    "path",
    "line",
    "circle",
}


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = self.cur = Node("#root", {}, None)

    def handle_starttag(self, tag, attrs):
        n = Node(tag, {k: v or "" for k, v in attrs}, self.cur)
        self.cur.children.append(n)
        if tag not in _VOID:
            self.cur = n

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, {k: v or "" for k, v in attrs}, self.cur))

    def handle_endtag(self, tag):
        n = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.children.append(data)


def dom(html: str) -> Node:
    b = _Builder()
    b.feed(html)
    b.close()
    return b.root


def browser_dom(path: Path, tmp: Path) -> str:
    """The DOM chromium built from the file, serialised (bounded; the browser's process group is ended)."""
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={tmp / 'chromium-profile'}",
        "--dump-dom",
        path.resolve().as_uri(),
    ]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        out = ""
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the browser's helpers too
        except ProcessLookupError:
            pass
        p.wait(timeout=10)
    assert "<html" in out, f"chromium gave no DOM for {path}"
    return out


# --- the runs (once per module) ---------------------------------------------------------------------------

# one worker runs the module fixture's four runs once; the extended tier since stop 57 (the fixture alone took
# 42 s of the README's run)
pytestmark = [pytest.mark.xdist_group("html"), pytest.mark.extended]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, shared_job) -> dict:
    tmp = tmp_path_factory.mktemp("html")
    # the hang probe with a line of HTML next to the culprit's line: it must show as text and never run
    src = (PROBES / "rank_conditional.py").read_text().splitlines()
    extra = marker_line(PROBES / "rank_conditional.py", "EXTRA")
    src.insert(extra, " " * 8 + INJECT)
    script = tmp / "rank_conditional.py"
    script.write_text("\n".join(src) + "\n")
    # the four runs side by side (threads wait on their processes): one worker's setup is the longest run's
    # time, not the sum of four (the shared ones may already be done by another module's worker)
    with ThreadPoolExecutor(4) as pool:
        jobs = {
            "hang": pool.submit(ddpdoctor, ["hang", str(script)], tmp),
            "memleak": pool.submit(shared_job.run, ["memleak", str(PROBES / "leak_graph.py"), "--steps", "60"]),
            "check": pool.submit(shared_job.run, ["check", str(PROBES / "check_set_epoch.py")]),
            "profile": pool.submit(shared_job.run, ["profile", "--bucket-ranges", str(PROBES / "straggler.py")]),
        }
        done = {name: f.result() for name, f in jobs.items()}
    out = {
        "hang": (
            done["hang"],
            "hang.rank-conditional-collective",
            {0},
            script,
            "EXTRA",
        ),
        "memleak": (
            done["memleak"],  # as test_memleak.py
            "memleak.autograd-graph",
            {0, 1},
            PROBES / "leak_graph.py",
            "ACCUM",
        ),
        "check": (
            done["check"],  # as test_check_probes.py
            "data.missing-set-epoch",
            {0, 1},
            PROBES / "check_set_epoch.py",
            "SAMPLER",
        ),
        "profile": (
            done["profile"],  # as test_profile.py
            "profile.straggler",
            {1},
            PROBES / "straggler.py",
            "SLOW",
        ),
    }
    return {"tmp": tmp, **out}


def _check_report(root: Node, fid: str, culprits: set[int], script: Path, marker: str) -> None:
    arts = root.find_all("article", **{"data-finding": fid})
    assert arts, f"no finding {fid} in the report: {[a.attrs.get('data-finding') for a in root.find_all('article')]}"
    art = arts[0]
    cul = [n for n in art.find_all(class_="culprit") if n.attrs.get("data-culprits")]
    assert cul and {int(r) for r in cul[0].attrs["data-culprits"].split(",")} == culprits, [n.attrs for n in cul]
    want = marker_line(script, marker)
    line = script.read_text().splitlines()[want - 1].strip()
    marked = [
        (tbl.attrs.get("data-line"), tr.text())
        for tbl in art.find_all("table", class_="src")
        for tr in tbl.find_all("tr", class_="mark")
    ]
    assert any(ln == str(want) and line in txt for ln, txt in marked), (want, line, marked)
    assert f"{script.name}:{want}" in art.text()


def _check_offline(root: Node, html: str) -> None:
    """Nothing that loads or runs: no script, no external style/image/frame; no http(s) in any attribute
    that the browser fetches or follows, nor in a CSS url()/@import."""
    assert not root.find_all("script"), "the report holds a <script> element"
    for tag in ("link", "iframe", "img", "object", "embed", "frame", "audio", "video", "source"):
        assert not root.find_all(tag), f"the report holds a <{tag}>"
    for n in root.walk():
        for k in ("src", "href", "action", "srcset", "data", "poster", "background", "formaction"):
            v = (n.attrs.get(k) or "").strip().lower()
            assert not re.match(r"(https?:)?//", v), f"<{n.tag} {k}={v}> points to the network"
    styles = "".join(n.text() for n in root.find_all("style")) + " ".join(n.attrs.get("style", "") for n in root.walk())
    assert "url(" not in styles and "@import" not in styles
    assert not re.search(r"\b(src|href)\s*=\s*[\"']?https?://", html, re.I)


@pytest.mark.parametrize("name", ["hang", "memleak", "check", "profile"])
def test_report_in_the_run_directory_parsed(runs, name):
    r, fid, culprits, script, marker = runs[name]
    assert r.report is not None and fid in [f["id"] for f in r.report["findings"]], r.err[-2000:]
    path = r.run_dir / "report.html"
    assert path.exists(), f"no report.html in {r.run_dir}: {r.out}"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert f"report to open in a browser: {path}" in r.out
    html = path.read_text()
    root = dom(html)
    _check_report(root, fid, culprits, script, marker)
    _check_offline(root, html)


@needs_browser
@pytest.mark.parametrize("name", ["hang", "memleak", "check", "profile"])
def test_report_in_a_browser(runs, name):
    r, fid, culprits, script, marker = runs[name]
    html = browser_dom(r.run_dir / "report.html", runs["tmp"] / name)
    root = dom(html)
    _check_report(root, fid, culprits, script, marker)
    _check_offline(root, html)
    if name == "hang":
        # the injected line is shown as text; no element came from it and nothing ran
        title = root.find_all("title")[0].text()
        assert "pwned" not in title
        assert INJECT.lstrip("# ") in root.text()
        assert not [n for n in root.walk() if n.tag == "b" and n.text() == "not bold"]
        # the sequences side by side: the first divergence row, the culprit's column marked
        seq = root.find_all("table", class_="seq")
        assert seq, "no collective sequence table"
        heads = [th.text() for th in seq[0].find_all("th", class_="cul")]
        assert heads == ["rank 0 (culprit)"], heads
        assert any("first divergence" in th.text() for th in seq[0].find_all("th", class_="div"))
        assert root.find_all("details"), "stacks are not folded"
        # the picture, as the browser built it: a lane per rank, the culprit's marked at its collective
        (lanes,) = root.find_all("svg", class_="lanes")
        drawn = {int(g.attrs["data-rank"]): g for g in lanes.find_all("g", class_="lane")}
        assert set(drawn) == {0, 1} and drawn[0].attrs.get("data-culprit") == "1"
        assert drawn[0].find_all("circle", class_="diverged") and not drawn[1].find_all("circle", class_="diverged")
    if name == "memleak":
        assert root.find_all("svg"), "no memory chart"
        assert "total_loss" in root.find_all("section", id="memory")[0].text()
    if name == "profile":
        _check_timeline(root, {0, 1}, straggler=1)


def _width(nodes: list[Node]) -> float:
    return sum(float(n.attrs.get("width") or 0) for n in nodes)


def _check_timeline(root: Node, ranks: set[int], straggler: int) -> None:
    """The profile section's timeline: one lane per rank over the same steps, the phases drawn, the
    straggler's lane marked and its forward visibly longer than the others'."""
    sec = root.find_all("section", id="profile")
    assert sec, "no profile section"
    svgs = sec[0].find_all("svg", class_="timeline")
    assert svgs, "no steady-state timeline in the profile section"
    steps = [int(x) for x in svgs[0].attrs["data-steps"].split(",")]
    assert 3 <= len(steps) <= 5 and steps == list(range(steps[0], steps[0] + len(steps))), steps
    assert steps[0] >= 40 // 5, steps  # past the warm-up
    lanes = {int(g.attrs["data-rank"]): g for g in svgs[0].find_all("g", class_="lane")}
    assert set(lanes) == ranks, lanes.keys()
    assert [r for r, g in lanes.items() if g.attrs.get("data-straggler") == "1"] == [straggler]
    assert lanes[straggler].find_all("text")[0].text() == f"rank {straggler} (straggler)"
    for r, g in lanes.items():
        for phase in ("forward", "backward", "optimizer", "comm"):
            assert g.find_all("rect", class_=f"ph-{phase}"), (r, phase)
        assert len(g.find_all("line")) == len(steps)  # a step boundary per step
    other = next(r for r in ranks if r != straggler)
    # the straggler's 15 ms of extra forward per step; the other rank waits for it in the all-reduce
    assert _width(lanes[straggler].find_all("rect", class_="ph-forward")) > 3 * _width(
        lanes[other].find_all("rect", class_="ph-forward")
    )
    assert _width(lanes[other].find_all("rect", class_="ph-comm")) > _width(
        lanes[straggler].find_all("rect", class_="ph-comm")
    )
    assert "trace.json" in [a.attrs.get("href") for a in sec[0].find_all("a")]


def test_profile_timeline_parsed(runs):
    r = runs["profile"][0]
    _check_timeline(dom((r.run_dir / "report.html").read_text()), {0, 1}, straggler=1)


def test_profile_timeline_at_1024_ranks():
    """Pure: 1,024 ranks' timelines give a few lanes (the straggler, the slowest, median and fastest)."""
    from ddpdoctor.analysis.findings import Finding, Report
    from ddpdoctor.record.reader import RankRecord, RunRecord
    from ddpdoctor.render.html import profile as html_profile
    from ddpdoctor.render.html.page import render

    def timeline(r: int) -> list[dict]:
        out, t = [], 1_000_000_000
        fwd = (20 if r == 77 else 2 + r % 5) * 1_000_000
        for step in range(10):
            t0 = t
            for name, cat, ms in (
                ("forward", "compute", fwd),
                ("backward", "compute", 8_000_000),
                ("optimizer step", "optim", 1_000_000),
            ):
                out.append({"kind": "range", "name": name, "cat": cat, "tid": 1, "t0": t, "t1": t + ms})
                if name == "backward":
                    out.append(
                        {
                            "kind": "range",
                            "name": "all_reduce bucket 0",
                            "cat": "comm",
                            "tid": 2,
                            "t0": t + 1_000_000,
                            "t1": t + ms,
                        }
                    )
                t += ms
            out.append({"kind": "range", "name": "step", "cat": None, "tid": 1, "t0": t0, "t1": t, "payload": step})
        return out

    record = RunRecord(
        "/nonexistent", {"command": "profile"}, {r: RankRecord(rank=r, timeline=timeline(r)) for r in range(1024)}, []
    )
    f = Finding("profile.straggler", "warning", "rank 77 is slow", "", tuple(range(1024)), (), culprits=(77,))
    html = render(Report("profile", "ok", 0, "/nonexistent", (f,)), record)
    root = dom(html)
    svg = root.find_all("svg", class_="timeline")[0]
    lanes = {int(g.attrs["data-rank"]): g for g in svg.find_all("g", class_="lane")}
    assert len(lanes) <= html_profile.MAX_LANES
    assert lanes[77].attrs.get("data-straggler") == "1"
    # besides the straggler (the slowest): the median and the fastest step (forward 2 ms: ranks 0, 5, ...)
    labels = [g.find_all("text")[0].text() for g in lanes.values()]
    assert any("fastest step" in x for x in labels) and any("median step" in x for x in labels), labels
    assert "rank 0 (fastest step)" in labels
    assert svg.attrs["data-steps"] == "4,5,6,7"
    assert "Shown: 3 of 1024 ranks" in root.text()
    assert len(html) < 60_000, len(html)
    _check_offline(root, html)


def test_html_option_on_analyze(runs, tmp_path):
    r = runs["hang"][0]
    out = tmp_path / "hang.html"
    a = ddpdoctor(["analyze", str(r.run_dir), "--html", str(out)], tmp_path)
    assert a.code == 3, a.err
    assert f"HTML report: {out}" in a.out
    root = dom(out.read_text())
    _check_report(root, "hang.rank-conditional-collective", {0}, runs["hang"][3], "EXTRA")
    bad = ddpdoctor(["analyze", str(r.run_dir), "--html", "-"], tmp_path, json_report=False)
    assert bad.code == 2 and "--html needs a file name" in bad.err


@needs_browser
def test_screenshot_of_a_hang_report(runs):
    """The browser draws the page (a PNG, not an error page)."""
    r = runs["hang"][0]
    shot = runs["tmp"] / "hang.png"
    p = subprocess.Popen(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={runs['tmp'] / 'shot-profile'}",
            "--window-size=1200,1400",
            f"--screenshot={shot}",
            (r.run_dir / "report.html").resolve().as_uri(),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        p.wait(timeout=90)
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=10)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_readable_at_1024_ranks(tmp_path):
    """Pure: a hand-built 1,024-rank hang renders grouped rows (ranges), never one row per rank."""
    from builder import RunBuilder, pending

    from ddpdoctor.analysis.findings import Finding, Location, RankLine, Report
    from ddpdoctor.record.reader import load_run
    from ddpdoctor.render.html.page import render

    train = tmp_path / "train.py"
    train.write_text("\n".join(f"x = {i}  # line {i}" for i in range(1, 41)) + "\n")
    b = RunBuilder(tmp_path / "run", script=str(train))
    for r in range(1024):
        b.start(r)
        for s in (1, 2, 3):
            b.coll(r, s, 10)
        p = pending("all_reduce", 4, 20, 5.0) if r == 77 else pending("barrier", 4, 30, 5.0, shapes=())
        b.hb(r, 6.0, 4, p, where=20 if r == 77 else 30)
    record = load_run(str(tmp_path / "run"))
    for rec in record.ranks.values():  # the builder's sites name /work/train.py
        for ent in rec.ledger:
            ent["site"] = [str(train), ent["site"][1], "main"]
        rec.last_hb["pending"]["site"] = [str(train), rec.last_hb["pending"]["site"][1], "main"]
    locs = tuple(
        Location(r, str(train), 20 if r == 77 else 30, "main", "diverged" if r == 77 else "waiting")
        for r in range(1024)
    )
    f = Finding(
        "hang.rank-conditional-collective",
        "error",
        "first divergence at collective #4",
        "fix it",
        tuple(range(1024)),
        locs,
        {"divergence": {"group": "0", "seq": 4, "diverged": [77]}},
        (77,),
    )
    ranks = tuple(
        RankLine(
            r,
            "waiting",
            "waiting in all_reduce" if r == 77 else "waiting in barrier",
            Location(r, str(train), 20 if r == 77 else 30),
        )
        for r in range(1024)
    )
    html = render(Report("hang", "hang", 3, str(tmp_path / "run"), (f,), ranks), record)
    root = dom(html)
    assert len(root.find_all("tr")) < 60, len(root.find_all("tr"))
    assert "1023 ranks [0-76,78-1023]" in html
    rank_rows = root.find_all("section", id="ranks")[0].find_all("tr")
    assert len(rank_rows) == 3 and "rank 77" in rank_rows[1].text()  # culprit first
    seq_head = [th.text() for th in root.find_all("table", class_="seq")[0].find_all("thead")[0].find_all("th")]
    assert seq_head == ["#", "rank 77 (culprit)", "1023 ranks [0-76,78-1023]"], seq_head
    marked = [t.text() for t in root.find_all("tr", class_="mark")]
    assert any("x = 20" in t for t in marked) and any("x = 30" in t for t in marked)
    _check_offline(root, html)


def test_missing_source_file_is_a_note(tmp_path):
    from ddpdoctor.analysis.findings import Finding, Location, Report
    from ddpdoctor.render.html.page import render

    gone = str(tmp_path / "gone.py")
    f = Finding(
        "crash.exception", "error", "boom <b>", "", (0,), (Location(0, gone, 7, "main", "raised"),), culprits=(0,)
    )
    root = dom(render(Report("hang", "crash", 1, str(tmp_path), (f,)), None))
    assert "source not available" in root.text() and f"{gone}:7" in root.text()
    assert "boom <b>" in root.text() and not [n for n in root.walk() if n.tag == "b" and n.parent.tag == "p"]
