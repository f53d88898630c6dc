"""The environment that lets the probes into the ranks of a command ddpdoctor does not start itself (the
launcher form, ``-- COMMAND...``, and torchrun's ``--no-python``): the rank side is rank/enter.py."""

from __future__ import annotations

import importlib.util
import json
import os
from typing import Any

from ddpdoctor.record.schema import ENTER_ENV


def entry_dir() -> str:
    """The folder that holds only ddpdoctor's sitecustomize.py (``ddpdoctor/rank/entry``), found without
    importing the rank side."""
    spec = importlib.util.find_spec("ddpdoctor.rank")
    folders = list(spec.submodule_search_locations or ()) if spec else []
    return os.path.join(os.path.abspath(folders[0]), "entry")


def entry_env(run_dir: str, env: Any) -> dict[str, str]:
    """The variables the monitor adds to the environment ``env`` of the user's command: PYTHONPATH with the
    entry folder in front of the user's own, and ``DDPDOCTOR_ENTER`` (record/schema.py)."""
    entry = entry_dir()
    pythonpath = env.get("PYTHONPATH")
    cfg = {
        "run_dir": os.path.abspath(run_dir),
        "entry": entry,
        "root": os.path.dirname(os.path.dirname(os.path.dirname(entry))),  # the folder ddpdoctor/ is in
        "pythonpath": pythonpath,
    }
    return {"PYTHONPATH": entry + (os.pathsep + pythonpath if pythonpath else ""), ENTER_ENV: json.dumps(cfg)}
