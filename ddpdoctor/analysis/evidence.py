"""What the collectives' judgement stood on, said in the report: torch's flight recorder where it recorded,
ddpdoctor's collective wrappers where it was off, and the ranks whose flight record is missing. Pure."""

from __future__ import annotations

import dataclasses
from typing import Any

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
    handed = [r for r in missing if (record.ranks[r].event(schema.K_INIT) or {}).get("recorded")]
    kept = [r for r in missing if r not in handed]
    if kept:
        notes.append(
            f"no flight record from {ranks_phrase(kept)} (ended before it could be written): "
            "their collectives come from their heartbeats and ddpdoctor's ledger"
        )
    if handed:
        # the wrappers handed these ranks' collectives to torch's recorder (the default), so the ledger holds none
        # of them (divergence.unrecorded)
        notes.append(
            f"no flight record from {ranks_phrase(handed)} (ended before it could be written): their collectives "
            "were left to torch's flight recorder (DDPDOCTOR_COLLECTIVES=wrappers keeps ddpdoctor's own ledger of "
            "each call), so which calls they made is unknown and no divergence was read from them"
        )
    return tuple(notes)


def _final(rec: Any, group: str) -> int:
    """The last position of ``group`` the rank's own records say it reached (heartbeat, finish, ledger)."""
    out = 0
    for src in (rec.last_hb, rec.event(schema.K_FINISH)):
        seq = (src or {}).get("seq")
        if isinstance(seq, dict) and isinstance(seq.get(group), int):
            out = max(out, seq[group])
    for e in rec.ledger[-8:]:
        rng = e.get("seq")
        if e.get("group") == group and isinstance(rng, list) and rng and isinstance(rng[-1], int):
            out = max(out, rng[-1])
    return out


def _end_recorded(rec: Any) -> bool:
    """Whether the rank recorded its own end: its finish event, its final heartbeat, the exception it raised
    or the fatal signal it died of (its stack). A rank ended from outside before any of these (torchrun's
    SIGTERM once a peer died) has only its last periodic heartbeat, which may be from long before: a lower
    bound of its reach, not its end."""
    if rec.event(schema.K_FINISH) is not None or rec.error is not None or rec.fatal.strip():
        return True
    return bool((rec.last_hb or {}).get("final"))


def _furthest(record: RunRecord, ranks: set[int], group: str) -> int:
    """The furthest position of ``group`` that any of ``ranks`` recorded (heartbeats, finish, every entry)."""
    out = max((_final(record.ranks[r], group) for r in ranks), default=0)
    for r in ranks:
        for e in record.ranks[r].ledger:
            rng = e.get("seq")
            if e.get("group") == group and isinstance(rng, list) and rng and isinstance(rng[-1], int):
                out = max(out, rng[-1])
    return out


def harmonized(record: RunRecord) -> RunRecord:
    """The record with each rank's calls comparable across ranks. A rank that left no flight record (killed
    or aborted before its dump) knows of its collectives only the ones the wrappers saw; the positions torch
    filled in between are unknown there. Another rank's flight entry at such a position (DDP's bucket, FSDP's
    all-gather: a call torch made) is set aside, so that both read "a call torch made" and a culprit never
    rests on what only one rank's records carry. Positions beyond where that rank recorded its end stay (it
    never got there: that is evidence); a rank that did not record its end (``_end_recorded``: ended from
    outside) may have gone anywhere the others went, so all of those are unknown there. The input is not changed: the ranks whose ledgers change are copies."""
    have = {r for r, rec in record.ranks.items() if rec.flight is not None}
    # a rank that left its calls to the recorder (its init lists the ``recorded`` ops) has none of them in its
    # ledger: every rule already reads its positions as unknown (hang/divergence.unrecorded), and the others'
    # records stay whole for the rules that read a rank against its own steps
    lacking = [
        rec
        for r, rec in record.ranks.items()
        if r not in have and (init := rec.event(schema.K_INIT)) is not None and not init.get("recorded")
    ]
    if not have or not lacking:
        return record
    unknown: dict[str, set[int]] = {}  # group -> positions some rank without a flight record has no entry for
    groups = {e.get("group") for r in have for e in record.ranks[r].ledger if e.get("src") == "flight"}
    for rec in lacking:
        for g in groups:
            if not isinstance(g, str):
                continue
            covered: set[int] = set()
            for e in rec.ledger:
                rng = e.get("seq")
                if e.get("group") == g and isinstance(rng, list) and len(rng) == 2:
                    covered.update(range(int(rng[0]), int(rng[1]) + 1))
            upto = _final(rec, g) if _end_recorded(rec) else _furthest(record, have, g)
            unknown.setdefault(g, set()).update(p for p in range(1, upto + 1) if p not in covered)
    ranks = dict(record.ranks)
    for r in have:
        rec = ranks[r]
        kept = [
            e
            for e in rec.ledger
            if not (e.get("src") == "flight" and e.get("seq") and e["seq"][0] in unknown.get(str(e.get("group")), ()))
        ]
        if len(kept) != len(rec.ledger):
            ranks[r] = dataclasses.replace(rec, ledger=kept)
    return dataclasses.replace(record, ranks=ranks)
