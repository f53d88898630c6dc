"""What a rank writes about itself (rank/rankfiles.py): the manifest read back, and an exception as JSON
with its frames outermost first and the user's innermost line. (enable_faulthandler is left out: it
would take over pytest's own faulthandler and SIGTERM handler in this process.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ddpdoctor.rank.rankfiles import error_record, read_manifest

SCRIPT = """
def load(batch):
    return batch["labels"]

def main():
    load({})
"""


def test_read_manifest(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({"command": "hang", "settings": {"a": 1}}))
    assert read_manifest(str(tmp_path)) == {"command": "hang", "settings": {"a": 1}}
    with pytest.raises(FileNotFoundError):
        read_manifest(str(tmp_path / "none"))


def test_an_exception_record_names_the_users_innermost_line(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    ns: dict = {}
    exec(compile(SCRIPT, str(script), "exec"), ns)
    try:
        ns["main"]()
    except KeyError as exc:
        rec = error_record(exc)
    assert rec["type"] == "KeyError" and rec["module"] == "builtins" and rec["message"] == "'labels'"
    assert rec["user_frame"] == [str(script), 3, "load"]
    assert [f[2] for f in rec["frames"]][-2:] == ["main", "load"]
    assert rec["pid"] == os.getpid()


def test_a_long_message_is_cut() -> None:
    try:
        raise RuntimeError("x" * 10_000)
    except RuntimeError as exc:
        rec = error_record(exc)
    assert len(rec["message"]) == 4000
