"""What the collectives' judgement stood on, said in the report: torch's flight recorder where it recorded,
ddpdoctor's collective wrappers where it was off, and the ranks whose flight record is missing. Pure."""

from __future__ import annotations

from ddpdoctor.analysis.findings import ranks_phrase
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord


def recorder_notes(record: RunRecord) -> tuple[str, ...]:
    """One note where the recorder was off on some ranks (and why), one for the ranks that left no flight
    record although their recorder was on (ended before their dump: killed, or aborted by the backend)."""
    off: dict[int, str] = {}
    missing = []
    for r, rec in record.ranks.items():
        start = rec.event(schema.K_START) or {}
        fl = start.get("flight")
        if not isinstance(fl, dict):
            continue  # a run from before the recorder was read, or an attach run: nothing to say
        if not fl.get("on"):
            off[r] = str(fl.get("off") or "off")
        elif rec.flight is None and rec.event(schema.K_INIT) is not None:
            missing.append(r)
    notes = []
    if off:
        why = sorted(set(off.values()))
        notes.append(
            f"torch's flight recorder was not read on {ranks_phrase(sorted(off))} ({'; '.join(why)}): their "
            "collectives were judged on ddpdoctor's collective wrappers alone, which do not see the collectives "
            "torch makes itself (DDP's bucket all-reduces, FSDP's all-gathers and reduce-scatters)"
        )
    if missing:
        notes.append(
            f"no flight record from {ranks_phrase(missing)} (ended before it could be written): "
            "their collectives come from their heartbeats and ddpdoctor's ledger"
        )
    return tuple(notes)
