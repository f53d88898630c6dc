"""A rank's probe for in-process unit tests (tests/unit/rank/): rank 0 of a run directory in
``tmp_path``, with the real writers of ``record/writer.py``, never started (no heartbeat thread, no
monitor, no torchrun). It is ``rank/probe.Probe`` itself, built the way the bootstrap builds it, so the
wrappers and probes under test read exactly the attributes they read inside a rank.

Helpers read back what the writers received: ``records(probe, name)`` parses a rank file (a memory-mapped
ledger reads as NUL bytes after its data: the end), ``kinds`` filters records by kind.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ddpdoctor.record import schema


def make_probe(tmp_path: Path, manifest: dict[str, Any] | None = None) -> Any:
    """Rank 0's probe in a fresh run directory under ``tmp_path`` (the manifest written as the launcher does)."""
    from ddpdoctor.rank.probe import Probe

    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700, exist_ok=True)
    m = dict(manifest or {})
    (run_dir / schema.MANIFEST).write_text(json.dumps(m), encoding="utf-8")
    return Probe(str(run_dir), 0, m)


def records(probe: Any, name: str) -> list[dict[str, Any]]:
    """Every complete JSON line of the rank file ``name`` (e.g. ``schema.LEDGER``), in order."""
    path = os.path.join(probe.dir, name)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    z = data.find(b"\0")
    if z >= 0:
        data = data[:z]
    return [json.loads(ln) for ln in data.split(b"\n") if ln.strip()]


def kinds(recs: list[dict[str, Any]], *kind: str) -> list[dict[str, Any]]:
    """The records whose ``kind`` is one of ``kind``."""
    return [r for r in recs if r.get("kind") in kind]


def close(probe: Any) -> None:
    """Close the probe's files (the ledger's map trimmed), as ``Probe.finish`` does, without its final beat."""
    for w in (probe.ledger, probe.events, probe.hb, probe.stacks):
        try:
            w.close()
        except Exception:
            pass
    mm = getattr(probe.counters, "mm", None)
    if mm is not None:
        mm.close()
        probe.counters.mm = None
