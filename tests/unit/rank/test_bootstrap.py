"""rank/bootstrap.attempt_run_dir: a worker of torchrun's first attempt writes the run directory itself; one of
attempt k (TORCHELASTIC_RESTART_COUNT=k, torchrun's own variable) writes RUN_DIR/attempts/<k>/, and the
environment the script sees is left as it was."""

from __future__ import annotations

import json
import os

from builder import RunBuilder

from ddpdoctor.rank.bootstrap import attempt_run_dir


def test_attempt_k_writes_its_own_folder_and_attempt_0_the_run_directory(tmp_path, monkeypatch):
    b = RunBuilder(tmp_path / "run", torchrun_args=["--max-restarts", "1"])
    manifest = json.loads((b.root / "manifest.json").read_text())
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    assert attempt_run_dir(str(b.root), manifest) == (str(b.root), manifest)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    assert attempt_run_dir(str(b.root), manifest)[0] == str(b.root)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    env = dict(os.environ)
    d, m = attempt_run_dir(str(b.root), manifest)
    assert d == str(b.root / "attempts" / "1") and m["attempt"] == 1 and m["command"] == "hang"
    assert (b.root / "attempts" / "1" / "ranks").is_dir() and dict(os.environ) == env
