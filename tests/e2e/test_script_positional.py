"""The script the way torchrun takes it, for real: after the script, the arguments are the script's."""

from __future__ import annotations

from helpers import PROBES, ddpdoctor


def test_the_scripts_own_epochs_reach_it_under_check(tmp_path):
    # `check --script t.py --epochs 1`: before, check took --epochs for itself and the script ran its default
    script = tmp_path / "train.py"
    src = (PROBES / "healthy.py").read_text()
    script.write_text(
        src.replace("    args = ap.parse_args()\n", "    args = ap.parse_args()\n    print('ARGS', vars(args))\n")
    )
    r = ddpdoctor(["check", "--script", str(script), "--epochs", "1", "--samples", "64"], tmp_path)
    assert r.code == 0, r.err[-2000:]
    out = r.out + r.err
    assert out.count("ARGS {'epochs': 1, 'samples': 64, 'batch_size': 16}") == 2, out[-2000:]
    assert "epoch 0: mean loss" in out and "epoch 1: mean loss" not in out
    assert "Warning" not in out, out[-2000:]  # torch's "Failed to initialize NumPy": numpy is a dependency


def test_no_script_is_one_line_and_exit_2(tmp_path):
    r = ddpdoctor(["hang", "--nproc-per-node", "2"], tmp_path, json_report=False)
    assert r.code == 2
    assert r.err.strip().splitlines() == [
        "ddpdoctor: error: no script: ddpdoctor hang [OPTIONS] SCRIPT [ARGS]... (like torchrun), "
        "or --probe healthy for the built-in healthy job"
    ]
    assert not r.run_dir.exists()  # nothing ran, no stand-in script
