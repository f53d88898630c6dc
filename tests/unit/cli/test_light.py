"""`ddpdoctor --help` and the analysis of a saved run never import torch; the wheel carries the probes."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
from ddpdoctor.cli import main
try:
    main({args!r})
except SystemExit as e:
    code = e.code
print("TORCH_IMPORTED" if "torch" in sys.modules else "NO_TORCH", code, file=sys.stderr)
"""


def run_cli_in_process(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHECK.format(args=args)], capture_output=True, text=True, timeout=60)


def test_help_does_not_import_torch():
    for args in (["--help"], ["hang", "--help"], ["analyze", "--help"], ["--version"], ["findings", "crash.exception"]):
        r = run_cli_in_process(args)
        assert "NO_TORCH 0" in r.stderr, (args, r.stderr)
    r = run_cli_in_process(["hang", "--timeout", "5"])  # no script: the one line comes before any torch
    assert "ddpdoctor: error: no script" in r.stderr and "NO_TORCH 2" in r.stderr, r.stderr
    assert "Exit codes" in run_cli_in_process(["--help"]).stdout
