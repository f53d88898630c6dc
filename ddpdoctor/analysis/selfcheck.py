"""ddpdoctor's own health: a probe that failed inside a rank (``probe_error`` events) is reported, so
nobody trusts a ledger or a series that is missing records without being told. Pure."""

from __future__ import annotations

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, ranks_phrase
from ddpdoctor.analysis.ids import PROBE_INTERNAL_ERROR
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

# what a collective wrapper's failure costs; run directories written before probes said what they miss
_LEDGER_GAP = "those calls ran but are not in the ledger, so a hang among them is found by timeout, not by proof"


def detect(record: RunRecord, cfg: Config) -> list[Finding]:
    """One ``probe.internal-error`` per failing place (and error), naming the ranks and the missing data."""
    errs: dict[tuple[str, str, str], list[int]] = {}
    for r, rec in sorted(record.ranks.items()):
        for e in rec.events:
            if e.get("kind") == schema.K_PROBE_ERROR:
                key = (str(e.get("where") or "?"), str(e.get("error") or "?"), str(e.get("missing") or _LEDGER_GAP))
                errs.setdefault(key, []).append(r)
    out = []
    for (where, err, missing), ranks in sorted(errs.items()):
        out.append(
            Finding(
                PROBE_INTERNAL_ERROR,
                "note",
                f"ddpdoctor's {where} failed on {ranks_phrase(ranks)} ({err}): {missing}",
                "This is a ddpdoctor bug, not your script's: please report it with this message. The verdict "
                "above stands on the data that was recorded.",
                tuple(ranks),
                (),
                {"where": where, "error": err, "missing": missing},
            )
        )
    return out
