"""Issue 49: no form of the command line loses a user's option, for real. The three script forms with
ddpdoctor's options in each position, a module run with ``-m`` and a fault planted in it, and torchrun's
logging options merged with the tool's own capture. Real torchrun ranks on gloo; the heavy tier
(``pytest -m extended``, run by .ci/run after the README's command)."""

from __future__ import annotations

import json

import pytest
from helpers import ddpdoctor, finding, loc_of, marker_line

pytestmark = pytest.mark.extended

JOB = """\
import sys

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"ARGV{rank} {sys.argv[1:]!r} NAME {__name__} PKG {__package__!r}", flush=True)
    t = torch.ones(1)
    for step in range(12):
        dist.all_reduce(t)  # EVERY
        if rank == 1 and step == 4 and "--plant" in sys.argv:
            dist.all_reduce(t)  # PLANTED
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def _script(tmp_path):
    p = tmp_path / "job.py"
    p.write_text(JOB)
    return p


def _manifest(run_dir) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def test_the_original_script_option_form_keeps_ddpdoctors_options(tmp_path):
    # `hang --script S --json F --timeout 30`: before, --json and --timeout went to the script silently
    s = _script(tmp_path)
    report = tmp_path / "mine.json"
    r = ddpdoctor(
        ["hang", "--script", str(s), "--json", str(report), "--timeout", "30", "--", "--lr", "0.1"],
        tmp_path,
        json_report=False,
    )
    assert r.code == 0, r.err[-3000:]
    assert json.loads(report.read_text())["verdict"] == "ok"
    assert _manifest(r.run_dir)["timeout"] == 30.0
    assert "ARGV0 ['--lr', '0.1'] NAME __main__" in r.out + r.err
    assert "passed on" not in r.err


def test_ddpdoctors_names_after_the_script_are_passed_on_and_said_once(tmp_path):
    s = _script(tmp_path)
    r = ddpdoctor(["hang", "--timeout", "30", str(s), "--timeout", "7"], tmp_path)
    assert r.code == 0, r.err[-3000:]
    assert _manifest(r.run_dir)["timeout"] == 30.0  # ddpdoctor's is the one before the script
    assert "ARGV1 ['--timeout', '7']" in r.out + r.err
    notes = [line for line in r.err.splitlines() if "--timeout after the script" in line]
    assert len(notes) == 1 and "passed on" in notes[0], r.err[-2000:]


def test_a_module_run_with_dash_m_names_the_planted_fault_at_the_modules_line(tmp_path):
    pkg = tmp_path / "trainpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(JOB)
    r = ddpdoctor(["hang", "--timeout", "60", "-m", "trainpkg.train", "--plant"], tmp_path, cwd=tmp_path)
    assert r.code == 3, r.err[-3000:]
    out = r.out + r.err
    assert "NAME __main__ PKG 'trainpkg'" in out  # as python -m runs it
    f = finding(r.report, "hang.rank-conditional-collective")
    assert f["culprits"] == [1]
    file, line = loc_of(f, 1)
    assert file == str(pkg / "train.py") and line == marker_line(pkg / "train.py", "PLANTED")
    assert _manifest(r.run_dir)["module"] is True


def test_torchruns_logging_options_merge_with_the_tools_capture(tmp_path):
    # --redirects 1: the workers' stdout goes to the log files only, as under torchrun; --log-dir gets the
    # files torchrun would have written there; the run directory keeps its own copy
    s = _script(tmp_path)
    logs = tmp_path / "user-logs"
    r = ddpdoctor(["hang", "--redirects", "1", "--log-dir", str(logs), str(s)], tmp_path)
    assert r.code == 0, r.err[-3000:]
    assert "ARGV0" not in r.out + r.err
    theirs = sorted(logs.glob("*/attempt_0/0/stdout.log"))
    ours = sorted((r.run_dir / "logs").glob("*/attempt_0/0/stdout.log"))
    assert len(theirs) == 1 and len(ours) == 1
    assert "ARGV0 [] NAME __main__" in theirs[0].read_text() == ours[0].read_text()
