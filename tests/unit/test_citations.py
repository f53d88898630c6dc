"""Every test, script or page that the README, the docs, the code or the tests cite is in the repository
(docs/multinode.md once cited a network-namespace test that was never committed), and a cited test
function (``file.py::test_name``) is in that file."""

from __future__ import annotations

import re
import subprocess

from helpers import ROOT

CITED = re.compile(r"(?<![\w/.-])((?:tests|benchmarks|docs|probes)/[\w./-]*\w\.(?:py|sh|md|json|svg|png))(::\w+)?")
# paths that name a user's file in an example, not a file of this repository
EXAMPLES = {("docs/ci.md", "tests/test_train_ddp.py")}


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    if out.returncode != 0:  # not a git checkout (an sdist): every file under the root counts
        return [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file() and ".venv" not in p.parts]
    return out.stdout.split()


def test_every_cited_file_and_test_exists() -> None:
    files = _tracked()
    present = set(files)
    readers = [f for f in files if f.endswith((".md", ".py", ".sh")) or f == ".ci/run"]
    missing = []
    for src in readers:
        if src.startswith(("tests/corpus/", "tests/golden/")) or src == "tests/unit/test_citations.py":
            continue  # other people's style on purpose, and recorded run directories
        text = (ROOT / src).read_text(encoding="utf-8", errors="replace")
        for m in CITED.finditer(text):
            path, test = m.group(1), m.group(2)
            if (src, path) in EXAMPLES or re.search(r"\b[A-Z]{3,}\b", path):
                continue  # an example's file, or a placeholder such as probes/NAME.py
            if path not in present and not any(p.startswith(path.rstrip("/") + "/") for p in present):
                missing.append(f"{src}: {path}")
            elif test and not re.search(rf"def {re.escape(test[2:])}\b", (ROOT / path).read_text(encoding="utf-8")):
                missing.append(f"{src}: {path}{test}")
    assert not missing, "cited but not in the repository:\n" + "\n".join(sorted(set(missing)))
