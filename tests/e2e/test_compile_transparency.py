"""torch.compile under ddpdoctor is torch.compile under plain torchrun (issue 51; rank/compiled.py).

tests/scripts/compiled_forms.py trains in every compile form a user writes (torch.compile(DDP(model)),
DDP(torch.compile(model)), ddp_model.compile(), FSDP2 blocks compiled one by one, dist.all_reduce inside a
@torch.compile function; backend "eager") and each rank prints dynamo's own counters per form: frames
converted and compiled, recompiles, graph breaks, graphs, the frames holding compiled code. Under every
command they must be bare's, and the ranks' output must hold no dynamo warning bare's lacks; the tool must
still see the job (its steps, its DDP forwards) and still find a planted fault in a compiled job.

The matrix (one bare run, four commands) is in the extended tier; the planted hang is the default tier's
one cheap job.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TESTS, TOKEN_VAR, ddpdoctor, marker_line

SCRIPT = TESTS / "scripts" / "compiled_forms.py"
FORMS = ("compile_ddp", "ddp_compiled", "ddp_method", "fsdp2", "collective")
DDP_FORMS = 4  # every form but fsdp2 steps through DDP.forward
STEPS = 12

# not the tool's doing: torch 2.13's own abort of a finished gloo rank at exit (~6 % of clean runs); and the
# script's staircase of compiled code: five forms compiled one after another, each keeping its graphs and
# generated sources (bare: ~5,700 more Python objects after the last form than after the first), which
# memleak rightly reads as growth over the run's DDP steps
SCRIPTS_OWN = {"teardown.gloo-abort", "memleak.python-objects"}

# what dynamo says when it traces what it should not (the tool's wrappers): the lines compared with bare's
_DYNAMO_SAYS = re.compile(
    r"recompile_limit|does not know how to trace|[Gg]raph break|torch/_dynamo|torch/_logging|UserWarning|ddpdoctor/"
)
_PREFIX = re.compile(r"^(\[default\d+\]:)?(\[rank\d+\]:)?([WIE]\d{4} [\d:.]+ \d+ )?")


def counters(text: str) -> dict[tuple[int, str], dict]:
    """Each rank's dynamo counters per form, from the script's ``DYNAMO {...}`` lines."""
    out = {}
    for line in text.splitlines():
        if "DYNAMO {" in line:
            d = json.loads(line[line.index("{") :])
            out[(d.pop("rank"), d.pop("form"))] = d
    return out


def dynamo_lines(text: str) -> set[str]:
    """The ranks' lines that are dynamo speaking, without torchrun's prefix, time and pid."""
    return {_PREFIX.sub("", line) for line in text.splitlines() if _DYNAMO_SAYS.search(line) and "DYNAMO {" not in line}


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> str:
    """compiled_forms.py in all its forms under plain torchrun: its output."""
    tmp = tmp_path_factory.mktemp("bare")
    env = {k: v for k, v in os.environ.items() if k != TOKEN_VAR}
    cp = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(SCRIPT), "all"],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cp.returncode == 0, cp.stderr[-3000:]
    text = cp.stdout + cp.stderr
    assert set(counters(text)) == {(r, f) for r in (0, 1) for f in FORMS}, text[-3000:]
    return text


@pytest.mark.extended
@pytest.mark.parametrize("command", ["hang", "check", "memleak", "profile"])
def test_every_compile_form_compiles_as_bare_under_every_command(tmp_path: Path, bare: str, command: str) -> None:
    r = ddpdoctor([command, str(SCRIPT), "all"], tmp_path, timeout=300)
    assert r.report is not None, (r.out + r.err)[-3000:]
    bad = [f["id"] for f in r.report["findings"] if f["severity"] != "note" and f["id"] not in SCRIPTS_OWN]
    assert bad == [], bad
    # 1: memleak's finding on the script's own staircase (SCRIPTS_OWN), the one finding allowed
    assert r.code == (1 if any(f["severity"] == "error" for f in r.report["findings"]) else 0), r.out[-3000:]
    ours = r.out + r.err
    plain = counters(bare)
    got = counters(ours)
    for key in sorted(plain):
        assert got.get(key) == plain[key], (key, got.get(key), plain[key])
    # nothing dynamo said under the tool that it did not say bare (recompile_limit, untraceable builtins, ...)
    assert dynamo_lines(ours) <= dynamo_lines(bare), sorted(dynamo_lines(ours) - dynamo_lines(bare))
    # and the tool saw the job: every step of every form (rank/steps.py), every DDP forward of the DDP forms
    seen = f"{len(FORMS) * STEPS} steps, {DDP_FORMS * STEPS} DDP forwards"
    assert [x["detail"].split("; ")[-1] for x in r.report["ranks"]] == [seen] * 2


def test_a_rank_conditional_collective_in_a_compiled_ddp_job_is_found(tmp_path: Path) -> None:
    """torch.compile(DDP(model)) with one metric all_reduce only rank 1 makes: the hang is found at its line
    with its culprit, and dynamo says nothing of the tool (before issue 51: recompile_limit on the tool's
    DDP.forward wrapper, "does not know how to trace the builtin time.thread_time_ns")."""
    r = ddpdoctor(["hang", str(SCRIPT), "compile_ddp", "--plant"], tmp_path, timeout=240)
    assert r.code == 3, (r.out + r.err)[-3000:]
    f = next(x for x in r.report["findings"] if x["id"] == "hang.rank-conditional-collective")
    assert f["culprits"] == [1]
    line = marker_line(SCRIPT, "PLANTED")
    assert any(loc["file"] == str(SCRIPT) and loc["line"] == line for loc in f["locations"]), f["locations"]
    said = dynamo_lines(r.out + r.err)
    assert not [s for s in said if re.search(r"recompile_limit|does not know how to trace|ddpdoctor/", s)], said
