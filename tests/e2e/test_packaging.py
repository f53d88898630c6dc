"""The finding pages ship in the wheel, where ``ddpdoctor findings ID`` reads them from an installed package;
so do the launcher form's sitecustomize and the job store's package."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import pytest
from helpers import ROOT

from ddpdoctor.analysis.catalog import CATALOG


def test_every_page_is_in_the_wheel(tmp_path):
    pytest.importorskip("setuptools")  # --no-build-isolation: the build uses this environment's setuptools
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = tmp_path.glob("ddpdoctor-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"ddpdoctor/findings_pages/{fid}.md" for fid in CATALOG} <= names
    # the launcher form's way into the ranks, and the job store's package
    assert "ddpdoctor/rank/entry/sitecustomize.py" in names
    assert {f"ddpdoctor/launch/jobstore/{m}.py" for m in ("address", "transport", "exchange", "roles", "link")} <= names
    # installed from that wheel: -S keeps the editable install's finder (a .pth) out, so the package and its
    # pages are the wheel's; the dependencies come from this environment's site-packages
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = (
        "import sys; sys.path[:0] = sys.argv[1:3]; import ddpdoctor; assert ddpdoctor.__file__.startswith(sys.argv[1]); "
        "from ddpdoctor.cli import main; main(sys.argv[3:])"
    )
    deps = next(p for p in sys.path if p.endswith("site-packages"))
    out = subprocess.run(
        [sys.executable, "-S", "-c", code, str(site), deps, "findings", "memleak.rss"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode == 0 and out.stdout.startswith("# memleak.rss\n"), out.stderr[-2000:]
