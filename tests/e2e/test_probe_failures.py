"""A probe that fails inside a rank says so: the report names the probe and the data it misses
(probe.internal-error), and the script itself runs on unharmed. Real ranks (gloo), one per command."""

from __future__ import annotations

import pytest
from helpers import ROOT, ddpdoctor, finding

SCRIPT = ROOT / "tests" / "scripts" / "broken_probe.py"


@pytest.mark.parametrize(
    "command, where, missing",
    [
        ("memleak", "memleak census", "censuses of live tensors"),
        ("profile", "profile probe (on_tick)", "step and phase ranges"),
        ("check", "check probe (on_optimizer_step)", "sampler, DataLoader, seed"),
    ],
)
def test_a_broken_probe_is_named_with_the_data_it_misses(tmp_path, command, where, missing):
    r = ddpdoctor([command, str(SCRIPT), "--break", command], tmp_path, timeout=180)
    assert r.report is not None, r.err[-2000:]
    finding(r.report, "probe.internal-error")
    said = {f["evidence"]["where"]: f for f in r.report["findings"] if f["id"] == "probe.internal-error"}
    assert where in said, sorted(said)
    f = said[where]
    assert missing in f["evidence"]["missing"] and missing in f["message"]
    assert "broken on purpose by the test" in f["message"]
    assert sorted(f["ranks"]) == [0, 1]  # every rank's probe failed, and each said so once
    assert "probe.internal-error" in r.out  # the terminal report shows it too
    assert r.code == 0  # the script itself was not harmed: it trained to the end


def test_an_unbroken_run_has_no_probe_error(tmp_path):
    r = ddpdoctor(["memleak", str(SCRIPT), "--break", "none"], tmp_path, timeout=180)
    assert r.report is not None and r.code == 0, r.err[-2000:]
    assert "probe.internal-error" not in [f["id"] for f in r.report["findings"]]
