"""A property of ``ddpdoctor analyze`` on damaged run directories: fuzzed copies of the golden run directories
(tests/golden: real runs) never end in an internal error, and taking evidence away never turns a non-OK
verdict into OK. Each case changes one thing at one grain, drawn from a seeded generator (the same cases every
run): a file deleted, emptied or cut; a rank's folder deleted; one record (one line) deleted, one of its
fields removed, or its value replaced by one of another kind (``"now"`` where a time is, a dict where a line
is). A damaged record is set aside and said in one line (analysis/wellformed.py), or the run directory is
refused in one line (exit 2); the verdict of what is left stands."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from helpers import TESTS

from ddpdoctor.cli import main
from ddpdoctor.errors import ExitCode

GOLDEN = TESTS / "golden"
RUNS = ("rank_conditional", "mesh_tp_extra", "cross_group", "size_abort", "leak_graph", "healthy")
VALUES = ("now", None, -1, 1e308, [], {}, "", True, [1, "x"], {"a": 1})
LESS = ("file-deleted", "file-emptied", "file-cut", "rank-deleted", "record-deleted", "field-removed")
CASES = 150


def _mutate(top: Path, rng: random.Random) -> str:
    """One change at one grain; returns what it did."""
    kind = rng.choice((*LESS, "field-value", "field-value"))
    if kind == "rank-deleted":
        victim = rng.choice(sorted((top / "ranks").iterdir()))
        shutil.rmtree(victim)
        return f"{kind} {victim.name}"
    f = rng.choice(sorted(p for p in top.rglob("*") if p.is_file()))
    rel = f.relative_to(top)
    data = f.read_bytes()
    if kind == "file-deleted":
        f.unlink()
    elif kind == "file-emptied":
        f.write_bytes(b"")
    elif kind == "file-cut":
        f.write_bytes(data[: rng.randrange(len(data) + 1)])
    else:
        lines = data.split(b"\n")
        full = [i for i, line in enumerate(lines) if line.strip().startswith(b"{")]
        if not full:
            return f"nothing to change in {rel}"
        i = rng.choice(full)
        if kind == "record-deleted":
            del lines[i]
        else:
            try:
                rec = json.loads(lines[i])
            except json.JSONDecodeError:
                return f"not one record a line: {rel}"
            if not isinstance(rec, dict) or not rec:
                return f"nothing to change in {rel}"
            key = rng.choice(sorted(rec))
            if kind == "field-removed":
                del rec[key]
            else:
                rec[key] = rng.choice(VALUES)
            lines[i] = json.dumps(rec).encode()
            kind = f"{kind} {key}"
        f.write_bytes(b"\n".join(lines))
        return f"{kind} {rel}:{i}"
    return f"{kind} {rel}"


def _analyze(run: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, dict | None]:
    out = run.parent / "report.json"
    with pytest.raises(SystemExit) as ended:
        main(["analyze", str(run), "--json", str(out)])
    err = capsys.readouterr().err
    report = json.loads(out.read_text()) if out.exists() else None
    out.unlink(missing_ok=True)
    return int(ended.value.code or 0), err, report


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each golden run's own verdict (read once, without a change)."""
    out = {}
    for name in RUNS:
        tmp = tmp_path_factory.mktemp(name)
        shutil.copytree(GOLDEN / name, tmp / name)
        try:
            main(["analyze", str(tmp / name), "--json", str(tmp / "r.json")])
        except SystemExit:
            pass
        out[name] = json.loads((tmp / "r.json").read_text())["verdict"]
    return out


@pytest.mark.parametrize("case", range(CASES))
def test_a_damaged_copy_never_ends_in_an_internal_error_nor_turns_ok(case, tmp_path, capsys, verdicts):
    rng = random.Random(5000 + case)
    name = RUNS[case % len(RUNS)]
    run = tmp_path / name
    shutil.copytree(GOLDEN / name, run)
    what = _mutate(run, rng)
    code, err, report = _analyze(run, capsys)
    assert code != ExitCode.INTERNAL and "Traceback" not in err, (name, what, err[-2000:])
    if code == ExitCode.USAGE:  # refused: one line, no report
        assert err.strip().count("\n") == 0, (name, what, err)
        return
    assert report is not None, (name, what, err[-500:])
    if what.startswith(LESS) and verdicts[name] != "ok":
        assert report["verdict"] != "ok", (name, what, report["findings"])
