"""ddpdoctor's own health: a probe that failed inside a rank (``probe_error`` events) is reported, so
nobody trusts a ledger or a series that is missing records without being told. Pure."""

from __future__ import annotations

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, ranks_phrase
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord


def detect(record: RunRecord, cfg: Config) -> list[Finding]:
    errs: dict[tuple[str, str], list[int]] = {}
    for r, rec in sorted(record.ranks.items()):
        for e in rec.events:
            if e.get("kind") == schema.K_PROBE_ERROR:
                errs.setdefault((str(e.get("where") or "?"), str(e.get("error") or "?")), []).append(r)
    out = []
    for (where, err), ranks in sorted(errs.items()):
        out.append(Finding(
            "probe.internal-error", "note",
            f"ddpdoctor's {where} failed on {ranks_phrase(ranks)} ({err}): those calls ran but are not in the "
            "ledger, so a hang among them is found by timeout, not by proof",
            "This is a ddpdoctor bug, not your script's: please report it with this message.",
            tuple(ranks), (), {"where": where, "error": err}))
    return out
