"""The script the way torchrun takes it, for real: after the script, the arguments are the script's."""

from __future__ import annotations

import json

from helpers import PROBES, ddpdoctor


def test_the_script_option_is_ddpdoctors_option_and_the_scripts_own_follow_dash_dash(tmp_path):
    # issue 49: `check --script t.py --epochs 1` gives check its --epochs (the original usage and the CI steps
    # written for it); the script's own arguments follow --
    script = tmp_path / "train.py"
    src = (PROBES / "healthy.py").read_text()
    script.write_text(
        src.replace("    args = ap.parse_args()\n", "    args = ap.parse_args()\n    print('ARGS', vars(args))\n")
    )
    r = ddpdoctor(["check", "--script", str(script), "--epochs", "1", "--", "--samples", "64"], tmp_path)
    assert r.code == 0, r.err[-2000:]
    out = r.out + r.err
    assert out.count("ARGS {'epochs': 2, 'samples': 64, 'batch_size': 16}") == 2, out[-2000:]
    # check took --epochs 1 (its stop rule); the script kept its own default of 2
    assert json.loads((r.run_dir / "manifest.json").read_text())["stop"]["epochs"] == 1
    assert "epoch 0: mean loss" in out
    assert "Warning" not in out, out[-2000:]  # torch's "Failed to initialize NumPy": numpy is a dependency


def test_no_script_is_one_line_and_exit_2(tmp_path):
    r = ddpdoctor(["hang", "--nproc-per-node", "2"], tmp_path, json_report=False)
    assert r.code == 2
    assert r.err.strip().splitlines() == [
        "ddpdoctor: error: no script: ddpdoctor hang [OPTIONS] SCRIPT [ARGS]... (like torchrun), "
        "or -m MODULE [ARGS]..., or --probe healthy for the built-in healthy job"
    ]
    assert not r.run_dir.exists()  # nothing ran, no stand-in script
