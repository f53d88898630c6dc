"""Teardown noise that is not the user's fault. Pure.

torch 2.13 with gloo sometimes aborts a rank that has finished all its work while the interpreter
exits (``terminate called without an active exception``, a few runs in a hundred).
"""

from __future__ import annotations

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, ranks_phrase
from ddpdoctor.analysis.ids import TEARDOWN_GLOO_ABORT
from ddpdoctor.analysis.state import TEARDOWN_ABORT
from ddpdoctor.record.reader import RunRecord


def detect(record: RunRecord, cfg: Config) -> list[Finding]:
    """Findings about how ranks ended after their work (the known gloo abort at exit)."""
    hit = []
    for r, rec in record.ranks.items():
        fin = rec.event("finish")
        if fin is not None and not fin.get("exception") and TEARDOWN_ABORT in rec.stderr_tail:
            hit.append(r)
    if not hit:
        return []
    return [
        Finding(
            TEARDOWN_GLOO_ABORT,
            "warning",
            f"{ranks_phrase(hit)} finished their work, then aborted at interpreter exit "
            f"('{TEARDOWN_ABORT}'): a known torch/gloo teardown race, not your training code",
            "Call dist.destroy_process_group() at the end of the script; nothing of the training "
            "was lost. torchrun may report the run as failed because of it.",
            tuple(hit),
            (),
            {"stderr": TEARDOWN_ABORT},
            culprits=(),
        )
    ]
